"""The HTTP shell: aiohttp handlers that execute the core's decisions."""
