"""The benchmarks' MariaDB (bench/mariadbd.py, used by bench.wrk and bench.chaos): a private
mariadbd whose commits outlive a SIGKILL and that hangs when paused; and, slow, one tiny
``bench.wrk`` run with PostgreSQL and MariaDB side by side."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator

import asyncmy
import pytest

from bench.mariadbd import SETTINGS_SQL, BenchMariaDB
from tests.mariadbserver import probe
from tests.support import REPO

pytestmark = pytest.mark.mariadb


@pytest.fixture
def server() -> Iterator[BenchMariaDB]:
    one = BenchMariaDB()
    try:
        one.start()
        yield one
    finally:
        one.cleanup()


async def query(server: BenchMariaDB, sql: str) -> list[tuple[object, ...]]:
    conn = await asyncmy.connect(host="127.0.0.1", port=server.port, user="root",
                                 autocommit=True, connect_timeout=3)
    try:
        async with conn.cursor() as cur:
            await cur.execute(sql)
            return list(await cur.fetchall())
    finally:
        conn.close()


async def test_a_commit_outlives_a_sigkill_and_a_paused_server_does_not_answer(
        server: BenchMariaDB) -> None:
    """Every commit is fsynced before it is answered (the setting the benchmarks state), so a
    row committed just before mariadbd is SIGKILLed is there after the restart; while paused
    (SIGSTOP) the server answers nothing, and after SIGCONT it answers again."""
    [(_, flush, *_)] = await query(server, SETTINGS_SQL)
    assert int(str(flush)) == 1
    await query(server, "CREATE DATABASE bench_check")
    await query(server, "CREATE TABLE bench_check.t (id INT PRIMARY KEY) ENGINE = InnoDB")
    await query(server, "INSERT INTO bench_check.t VALUES (1)")
    await asyncio.to_thread(server.kill)
    assert await probe(server.dsn) is not None  # down
    await asyncio.to_thread(server.start)
    assert await query(server, "SELECT id FROM bench_check.t") == [(1,)]

    with server.paused():
        started = time.monotonic()
        assert await probe(server.dsn) is not None  # no answer within the probe's timeout
        assert time.monotonic() - started >= 1.0
    assert await probe(server.dsn) is None


@pytest.mark.slow  # about 70 s: a PostgreSQL database, a mariadbd, the proxies and wrk
def test_bench_wrk_runs_postgres_and_mariadb_side_by_side() -> None:
    """One short run of new events and known duplicates on both stores: it passes its own
    checks (every answer 2xx, each new event at the app once, no duplicate), and the report
    has each store's rows and the MariaDB ÷ PostgreSQL table."""
    argv = [sys.executable, "-m", "bench.wrk", "--store", "postgres,mariadb",
            "--phases", "passthrough,new,dups-known", "--duration", "2", "--warmup", "1",
            "--settle", "0", "--max-rate", "3000"]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=150,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    for row in ("sidecar: new events — PostgreSQL", "sidecar: new events — MariaDB",
                "sidecar: duplicates known to the process — MariaDB",
                "| phase: MariaDB ÷ PostgreSQL |", "innodb_flush_log_at_trx_commit=1",
                "Checks: every answer 2xx"):
        assert row in done.stdout, done.stdout
