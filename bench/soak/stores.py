"""One store under soak: a private cluster, its migrated database, and what it costs — read
from the cluster's own statistics and /proc, so the other store's load never shows in it."""

from __future__ import annotations

import asyncio
import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg

from bench.wrk.procs import children, cpu_us
from tests.pgserver import ThrowawayCluster, create_database

DATABASE = "soak"
TABLES = ("webhook_event", "webhook_attempt", "webhook_queue", "webhook_nonce")

# Every leaf table of the schema (partitions included, the partitioned parents hold no data):
# heap, TOAST and indexes.
SIZE = """
SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'public' AND c.relkind = 'r'
"""
PARTITIONS = """
SELECT count(*) FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent
 WHERE p.relname = 'webhook_event'
"""
# Autovacuum and autoanalyze runs per table of the schema (partitions are tables; a dropped
# partition takes its counts with it, so days are told apart table by table).
AUTOVACUUM = """
SELECT relid, autovacuum_count, autoanalyze_count
  FROM pg_stat_all_tables WHERE schemaname = 'public'
"""


@dataclass(frozen=True, slots=True)
class Sample:
    """The store's counters at one moment."""

    @staticmethod
    def runs(start: dict[int, int], end: dict[int, int]) -> int:
        """Runs between two samples, over the tables alive at the end (a table made since
        counts from 0; one dropped since is not seen, and its last runs are lost)."""
        return sum(n - start.get(relid, 0) for relid, n in end.items())

    wal_lsn: int  # bytes since the cluster's start of WAL
    commits: int
    pg_cpu_us: float
    size: int
    rows: int
    partitions: int
    vacuums: dict[int, int]  # autovacuum runs so far, by table
    analyzes: dict[int, int]


def cluster_settings(day_seconds: float) -> dict[str, str]:
    """Lock waits over 100 ms are logged (with the waiting statement); autovacuum looks for
    work once a simulated minute (≥ 1 s), as its default of a real minute would."""
    naptime = max(1, round(day_seconds * 60 / 86400))
    return {"log_lock_waits": "on", "deadlock_timeout": "100ms",
            "log_line_prefix": "%m [%p] ", "autovacuum_naptime": f"{naptime}s",
            "max_connections": "50", "shared_buffers": "64MB"}


class SoakStore:
    """A started private cluster and a database on it; :meth:`close` stops and deletes both."""

    def __init__(self, name: str, base: Path, day_seconds: float) -> None:
        self.name = name
        self.cluster = ThrowawayCluster(base / name, fsync=True,
                                        settings=cluster_settings(day_seconds))
        self.dsn = ""
        self.conn: Any = None
        self.postmaster = 0

    async def open(self) -> None:
        await asyncio.to_thread(self.cluster.start)
        self.dsn = await create_database(self.cluster.dsn, DATABASE)
        self.conn = await asyncpg.connect(self.dsn, timeout=10,
                                          server_settings={"application_name": "soak-probe"})
        pidfile = (self.cluster.data_dir / "postmaster.pid").read_text
        self.postmaster = int((await asyncio.to_thread(pidfile)).split()[0])

    def log_offset(self) -> int:
        try:
            return self.cluster.log_file.stat().st_size
        except OSError:
            return 0

    def log_since(self, offset: int) -> str:
        with open(self.cluster.log_file, "rb") as handle:
            handle.seek(offset)
            return handle.read().decode(errors="replace")

    def pg_cpu_us(self) -> float:
        """CPU of the whole cluster: the postmaster, its live children, and (cutime + cstime)
        the children it has reaped — autovacuum workers and closed sessions included."""
        try:
            with open(f"/proc/{self.postmaster}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except OSError:
            return 0.0
        reaped = (int(fields[13]) + int(fields[14])) * 1e6 / os.sysconf("SC_CLK_TCK")
        return cpu_us(self.postmaster) + reaped + sum(
            cpu_us(pid) for pid in children(self.postmaster))

    async def sample(self) -> Sample:
        conn = self.conn
        lsn = await conn.fetchval("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        commits = await conn.fetchval(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
        vac = await conn.fetch(AUTOVACUUM)
        return Sample(
            wal_lsn=int(lsn), commits=int(commits or 0), pg_cpu_us=self.pg_cpu_us(),
            size=int(await conn.fetchval(SIZE)),
            rows=int(await conn.fetchval("SELECT count(*) FROM webhook_event")),
            partitions=int(await conn.fetchval(PARTITIONS)),
            vacuums={r["relid"]: int(r["autovacuum_count"]) for r in vac},
            analyzes={r["relid"]: int(r["autoanalyze_count"]) for r in vac})

    async def close(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):
                await self.conn.close(timeout=5)
        await asyncio.to_thread(self.cluster.cleanup)
