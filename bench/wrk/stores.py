"""The stores of the webhook-sidecar phases: PostgreSQL databases made from a migrated
template, and the seeding of a template (PostgreSQL or SQLite) with done rows."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from bench.wrk.procs import REPO, BenchError, children, cpu_us, die_with_parent, parent


class PgStore:
    """A migrated template database and, per phase, a fresh copy of it; only these two are
    ever created, read or dropped (plus read-only looks at pg_stat_* and /proc)."""

    def __init__(self, admin_dsn: str) -> None:
        self.admin_dsn = admin_dsn
        self.name = f"bench_wrk_{os.getpid()}"
        self.template = f"{self.name}_tpl"
        self.conn: Any = None
        self.postmaster = 0
        self.version = ""
        self.durability = ""
        self.created: set[str] = set()

    def dsn(self, name: str) -> str:
        return urlunsplit(urlsplit(self.admin_dsn)._replace(path=f"/{name}"))

    async def open(self) -> None:
        try:
            self.conn = await asyncpg.connect(self.admin_dsn, timeout=5)
        except (OSError, asyncpg.PostgresError) as exc:
            raise BenchError(f"PostgreSQL at {self.admin_dsn} is not reachable ({exc}): set "
                             "$SIDECAR_BENCH_PG_DSN or use --store sqlite", 2) from None
        self.version = await self.conn.fetchval("SHOW server_version")
        self.durability = ", ".join([
            f"synchronous_commit={await self.conn.fetchval('SHOW synchronous_commit')}",
            f"fsync={await self.conn.fetchval('SHOW fsync')}"])
        backend = await self.conn.fetchval("SELECT pg_backend_pid()")
        self.postmaster = parent(backend)

    async def create(self, name: str, template: str | None = None) -> None:
        await self.drop(name)
        self.created.add(name)
        if template is None:
            await self.conn.execute(f'CREATE DATABASE "{name}"')
        else:
            await self.conn.execute(
                f'CREATE DATABASE "{name}" TEMPLATE "{template}" STRATEGY FILE_COPY')

    async def drop(self, name: str) -> None:
        await self.conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self.created.discard(name)

    async def fresh(self) -> str:
        await self.create(self.name, self.template)
        return self.dsn(self.name)

    async def checkpoint(self) -> None:
        await self.conn.execute("CHECKPOINT")

    async def commits(self) -> int:
        value = await self.conn.fetchval(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = $1", self.name)
        return int(value or 0)

    async def wait_idle(self, timeout: float = 15.0) -> None:
        """Until no session is left on the phase's database (its stats are then flushed)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            left = await self.conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", self.name)
            if not left:
                return
            await asyncio.sleep(0.05)

    async def cpu(self) -> dict[int, float]:
        """CPU µs of the postmaster and its children, except sessions on other databases."""
        others = {row["pid"] for row in await self.conn.fetch(
            "SELECT pid FROM pg_stat_activity WHERE datname IS NOT NULL AND datname <> $1",
            self.name)}
        pids = [self.postmaster, *children(self.postmaster)]
        return {pid: cpu_us(pid) for pid in pids if pid not in others}

    async def close(self) -> None:
        if self.conn is None:
            return
        for name in list(self.created):
            with contextlib.suppress(Exception):
                await self.drop(name)
        await self.conn.close()


def cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    return sum(value - before.get(pid, 0.0) for pid, value in after.items())


async def migrate(config: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "sidecar", "migrate", "--config", str(config), cwd=str(REPO),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    if proc.returncode != 0:
        raise BenchError(f"webhook-sidecar migrate failed:\n{out.decode(errors='replace')}")


def clone_select(columns: list[str], dialect: str) -> tuple[str, str]:
    """Column list and SELECT expressions cloning the template row ``t`` for each ``g``:
    a unique, uuid-like event id, and receive/update times spread over the past."""
    exprs = []
    for col in columns:
        if col == "event_id":
            exprs.append("md5(g::text)::uuid::text" if dialect == "postgres" else
                         "printf('%08x-seed-%012d', (g.n * 2654435761) % 4294967296, g.n)")
        elif col in ("received_at", "updated_at"):
            exprs.append(f"t.{col} - g * interval '50 milliseconds'" if dialect == "postgres"
                         else f"t.{col} - g.n * 0.05")
        else:
            exprs.append(f"t.{col}")
    return ", ".join(columns), ", ".join(exprs)


async def seed_postgres(dsn: str, template_id: str, rows: int) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        columns = [r["column_name"] for r in await conn.fetch(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_name = 'webhook_event' ORDER BY ordinal_position")]
        names, exprs = clone_select(columns, "postgres")
        order = columns.index("event_id") + 1
        await conn.execute("SET synchronous_commit = off; SET maintenance_work_mem = '256MB'")
        await conn.execute(
            f"INSERT INTO webhook_event ({names}) SELECT {exprs} FROM webhook_event t "
            f"CROSS JOIN generate_series(1, $1::bigint) g WHERE t.event_id = $2 "
            f"ORDER BY {order}", rows, template_id, timeout=None)
        await conn.execute("VACUUM (FREEZE, ANALYZE) webhook_event", timeout=None)
        count, size = await conn.fetchrow(
            "SELECT count(*), pg_size_pretty(pg_total_relation_size('webhook_event')) "
            "FROM webhook_event")
        print(f"template: {count} rows, {size} with indexes", file=sys.stderr, flush=True)
    finally:
        await conn.close()


def seed_sqlite(path: Path, template_id: str, rows: int) -> None:
    con = sqlite3.connect(path)
    try:
        columns = [r[1] for r in con.execute("PRAGMA table_info(webhook_event)")]
        names, exprs = clone_select(columns, "sqlite")
        con.execute("PRAGMA synchronous = OFF")
        con.execute(
            "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ?) "
            f"INSERT INTO webhook_event ({names}) SELECT {exprs} FROM webhook_event t, g "
            "WHERE t.event_id = ? ORDER BY 2", (rows, template_id))
        con.commit()
        con.execute("ANALYZE")
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        count = con.execute("SELECT count(*) FROM webhook_event").fetchone()[0]
        print(f"template: {count} rows, {path.stat().st_size / 2**20:.0f} MiB", file=sys.stderr,
              flush=True)
    finally:
        con.close()

