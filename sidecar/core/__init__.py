"""The pure core: values and decisions, no I/O (imports neither aiohttp nor asyncpg)."""
