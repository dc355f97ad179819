"""``store.result_commit``: what a database crash right after a result write costs, with a real
`pg_ctl stop -m immediate` of a throwaway cluster and the proxy as a real process.

A commit with ``synchronous_commit = off`` is lost only if the server dies before its WAL
writer writes it out (a few hundred ms at most). The test holds that window open for as long as
it needs: it stops the cluster's WAL writer (SIGSTOP) before the delivery, so nothing but a
synchronous commit can write the WAL, then crashes the server. Nothing else in the test commits
in between."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from pathlib import Path

import aiohttp
import asyncpg
import pytest
import yaml

from tests.acceptance.conftest import run_cli
from tests.pgserver import ThrowawayCluster
from tests.support import (
    ProxyProcess,
    Rows,
    StubApp,
    base_config,
    post,
    stripe_event,
    stripe_headers,
)

STRIPE = "/webhooks/stripe"


@pytest.fixture
async def crash_cluster(tmp_path: Path) -> AsyncIterator[ThrowawayCluster]:
    # fsync on (the crash must lose only what was never written); no autovacuum, whose
    # commits would flush the WAL the test keeps unwritten.
    cluster = ThrowawayCluster(tmp_path / "pg", settings={"autovacuum": "off"})
    await asyncio.to_thread(cluster.start)
    try:
        yield cluster
    finally:
        await asyncio.to_thread(cluster.cleanup)


@contextmanager
def wal_writer_stopped(pid: int) -> Iterator[None]:
    """The WAL writer frozen: an asynchronous commit stays in the server's memory, where a crash
    loses it (a synchronous one writes and flushes its WAL itself)."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        with suppress(ProcessLookupError):  # killed with the server
            os.kill(pid, signal.SIGCONT)


async def wal_writer_pid(dsn: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        pid = await conn.fetchval(
            "SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'")
    finally:
        await conn.close()
    assert pid is not None, "no WAL writer process"
    return int(pid)


@asynccontextmanager
async def proxy(config_path: Path) -> AsyncIterator[ProxyProcess]:
    proc = await ProxyProcess(config_path).start()
    try:
        yield proc
    finally:
        await proc.terminate()


@pytest.mark.parametrize(("result_commit", "after_the_crash", "attempts"), [
    # The default: the record was flushed before the provider got its 200; the redelivery is
    # answered from it and never reaches the app.
    ("wait", ("done", 1), [1]),
    # The opt-in's documented price: the record died with the server; the row is `processing`
    # under the attempt's lease (and stays so if nothing comes again: the provider had its
    # 200), and a redelivery after the lease is forwarded again, marked attempt 2.
    ("no_wait", ("processing", 1), [1, 2]),
])
async def test_a_database_crash_right_after_the_record(
    crash_cluster: ThrowawayCluster, tmp_path: Path, result_commit: str,
    after_the_crash: tuple[str, int], attempts: list[int],
) -> None:
    stub = await StubApp().start()
    config = base_config(stub.url, crash_cluster.dsn, maintenance={"interval": "1h"})
    config["store"]["result_commit"] = result_commit
    config["providers"]["stripe"]["lease"] = "2500ms"
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(config))
    code, _, err = await run_cli("migrate", "--config", str(config_path))
    assert code == 0, err
    walwriter = await wal_writer_pid(crash_cluster.dsn)
    body = stripe_event("evt_crash")
    try:
        async with aiohttp.ClientSession() as client:
            async with proxy(config_path) as first:
                # Every pool connection opened and used once before the window opens.
                warm = stripe_event("evt_warm")
                assert (await post(client, first.url + STRIPE, warm, stripe_headers(warm))
                        )[0] == 200
                with wal_writer_stopped(walwriter):
                    status, _, _ = await post(client, first.url + STRIPE, body,
                                              stripe_headers(body))
                    assert status == 200  # the provider is told the app's answer
                    await asyncio.to_thread(crash_cluster.stop, "immediate")
            await asyncio.to_thread(crash_cluster.start)

            rows = Rows(crash_cluster.dsn)
            row = await rows.one("stripe", "evt_crash")
            assert row is not None and (row["state"], row["attempt"]) == after_the_crash
            warm_row = await rows.one("stripe", "evt_warm")  # flushed by the next claim
            assert warm_row is not None and warm_row["state"] == "done"
            for _ in range(100):  # a done row has no lease
                if row["state"] == "done" or await rows.lease_expired("stripe", "evt_crash"):
                    break
                await asyncio.sleep(0.05)
            else:
                pytest.fail("the lease never expired")
            # Another replica (the first one remembers the answer it relayed) gets the
            # provider's redelivery.
            async with proxy(config_path) as replica:
                for _ in range(2):
                    status, _, _ = await post(client, replica.url + STRIPE, body,
                                              stripe_headers(body))
                    assert status == 200
            assert stub.attempts("evt_crash") == attempts
            row = await rows.one("stripe", "evt_crash")
            assert row is not None and (row["state"], row["attempt"]) == ("done", attempts[-1])
    finally:
        await stub.stop()


async def test_no_wait_is_refused_on_sqlite(tmp_path: Path) -> None:
    config = base_config("http://127.0.0.1:9", f"sqlite:///{tmp_path / 'events.db'}")
    config["store"]["result_commit"] = "no_wait"
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(config))
    code, out, err = await run_cli("check-config", "--config", str(config_path))
    assert code != 0
    assert "store.result_commit" in out + err and "PostgreSQL only" in out + err
