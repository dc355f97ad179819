"""Helpers shared by the benchmarks: signing Stripe deliveries, a throwaway database."""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from sidecar.config.loader import parse_config
from sidecar.core.signing import Delivery, sign


def signer(config: dict[str, Any]) -> Callable[[bytes], dict[str, str]]:
    """Headers signing a body as the config's first provider (fresh timestamp each time)."""
    provider = parse_config(config, env={}).providers[0]

    def headers(body: bytes) -> dict[str, str]:
        return {"Content-Type": "application/json",
                **sign(provider.signature, provider.key_bytes[0], Delivery(body, {}), time.time())}

    return headers


async def with_pg_database(run: Callable[[str], Awaitable[Any]]) -> Any:
    """Run ``run(dsn)`` on a fresh database ($SIDECAR_BENCH_PG_DSN's server, else
    127.0.0.1:5432), dropped afterwards."""
    admin = os.environ.get("SIDECAR_BENCH_PG_DSN",
                           "postgresql://postgres@127.0.0.1:5432/postgres")
    name = f"sidecar_bench_{secrets.token_hex(4)}"
    conn = await asyncpg.connect(admin)
    await conn.execute(f'CREATE DATABASE "{name}"')
    await conn.close()
    dsn = urlunsplit(urlsplit(admin)._replace(path=f"/{name}"))
    try:
        return await run(dsn)
    finally:
        conn = await asyncpg.connect(admin)
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.close()
