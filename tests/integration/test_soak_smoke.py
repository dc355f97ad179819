"""bench.soak, small: its lock-wait reader against a real cluster's log, and one tiny soak
through the command line (a real cluster, proxy and app; seconds, not days)."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from bench.soak.locks import lock_waits
from bench.soak.stores import SoakStore
from tests.support import REPO


@pytest.fixture
async def store() -> AsyncIterator[SoakStore]:
    with tempfile.TemporaryDirectory(prefix="soak-test-") as tmp:
        # the cluster runs as postgres when the suite runs as root
        await asyncio.to_thread(Path(tmp).chmod, 0o755)
        one = SoakStore("locks", Path(tmp), day_seconds=60)
        try:
            await one.open()
            yield one
        finally:
            await one.close()


@pytest.mark.parametrize(("hold", "wait", "by_retention", "on_ddl"), [
    # retention's batch delete waiting for a row a delivery holds: retention's own wait
    ("SELECT * FROM webhook_event FOR UPDATE",
     "DELETE FROM webhook_event WHERE event_id = 'evt_1'", True, False),
    # a delivery's insert waiting for a relation lock, as behind partition DDL
    ("LOCK TABLE webhook_event IN ACCESS EXCLUSIVE MODE",
     "INSERT INTO webhook_event VALUES ('evt_2')", False, True),
])
async def test_a_lock_wait_over_100ms_is_read_from_the_log(
        store: SoakStore, hold: str, wait: str, by_retention: bool, on_ddl: bool) -> None:
    """One session holds a lock while the next waits for it: the cluster logs the wait past
    100 ms, and the reader finds it, its length and its statement, and tells whose it was."""
    await store.conn.execute("CREATE TABLE IF NOT EXISTS webhook_event "
                             "(event_id text PRIMARY KEY)")
    await store.conn.execute("INSERT INTO webhook_event VALUES ('evt_1') ON CONFLICT DO NOTHING")
    offset = store.log_offset()
    holder = await asyncpg.connect(store.dsn)
    waiter = await asyncpg.connect(store.dsn)
    try:
        hold_tx = holder.transaction()
        await hold_tx.start()
        await holder.execute(hold)
        waiting = asyncio.create_task(waiter.execute(wait))
        for _ in range(200):  # until the server reports the wait as logged (past 100 ms)
            if "still waiting" in store.log_since(offset):
                break
            await asyncio.sleep(0.05)
        await hold_tx.rollback()
        await waiting
    finally:
        await holder.close()
        await waiter.close()
    for _ in range(100):  # the "acquired" line follows the release
        if "acquired" in store.log_since(offset):
            break
        await asyncio.sleep(0.05)
    waits = lock_waits(store.log_since(offset))
    assert len(waits) == 1, store.log_since(offset)
    assert waits[0].waited_ms > 100
    assert waits[0].statement == wait
    assert (waits[0].by_retention, waits[0].on_ddl) == (by_retention, on_ddl)


@pytest.mark.slow  # about 40 s: a cluster's initdb, migrate, the proxy and 6 s of load
def test_a_tiny_soak_keeps_the_invariants_and_leaves_nothing_behind() -> None:
    """Two simulated days of 3 s against the unpartitioned store: the table, and the
    invariants pass (nothing lost, nothing forwarded twice); no cluster, proxy or app is left
    running."""
    argv = [sys.executable, "-m", "bench.soak", "--stores", "unpartitioned",
            "--day-seconds", "3", "--days", "2", "--events-per-day", "60", "--seed", "7"]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=90,
                          check=False)
    assert done.returncode in (0, 1), done.stderr  # 1: a goal failed (timing, at this size)
    out = done.stdout
    assert "| 2 |" in out, out
    assert "PASS unpartitioned: nothing lost" in out, out
    assert "PASS unpartitioned: nothing forwarded twice" in out, out
    work = re.search(r"soak: working in (\S+)", done.stderr)
    assert work is not None, done.stderr
    assert not Path(work.group(1)).exists()  # the clusters' files and the logs are deleted
    left = subprocess.run(["pgrep", "-f", work.group(1)], capture_output=True, text=True,
                          check=False)
    assert not left.stdout.strip(), f"left running: {left.stdout}"
