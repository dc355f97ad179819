"""Duplicate storms and crashes on MySQL / MariaDB, with real processes: two ``run`` processes
sharing one database, hundreds of identical deliveries fired at both at once, a process
SIGKILLed with an attempt in flight, and ``mariadbd`` SIGKILLed under a running proxy (a
throwaway server of this module's own). Nothing is lost, nothing reaches the app twice."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import asyncmy
import pytest

from tests.acceptance.conftest import run_cli
from tests.mariadbserver import (
    MariaDBServer,
    ThrowawayServer,
    _connect_args,
    create_database,
    drop_database,
    unique_database_name,
)
from tests.support import (
    ProxyProcess,
    StubApp,
    base_config,
    post,
    stripe_event,
    stripe_headers,
    write_config,
)

pytestmark = pytest.mark.mariadb

STRIPE = "/webhooks/stripe"


@pytest.fixture
async def database(mariadb_server: MariaDBServer) -> AsyncIterator[str]:
    name = unique_database_name("sidecar_storm")
    dsn = await create_database(mariadb_server.admin_dsn, name)
    try:
        yield dsn
    finally:
        await drop_database(mariadb_server.admin_dsn, name)


@pytest.fixture
async def stub() -> AsyncIterator[StubApp]:
    app = await StubApp().start()
    try:
        yield app
    finally:
        await app.stop()


async def rows(dsn: str) -> dict[str, tuple[str, int]]:
    """event id → (state, attempt), read beside the proxies."""
    conn = await asyncmy.connect(db=dsn.rsplit("/", 1)[1], **_connect_args(dsn))
    try:
        async with conn.cursor() as cur:
            await cur.execute("SELECT event_id, state, attempt FROM webhook_event")
            return {r[0].decode(): (r[1], int(r[2])) for r in await cur.fetchall()}
    finally:
        conn.close()


async def lease_expired(dsn: str, event_id: str) -> bool:
    """On the database's clock (the lease's own)."""
    conn = await asyncmy.connect(db=dsn.rsplit("/", 1)[1], **_connect_args(dsn))
    try:
        async with conn.cursor() as cur:
            await cur.execute("SELECT lease_until < UNIX_TIMESTAMP(NOW(6)) FROM webhook_event"
                              " WHERE provider = 'stripe' AND event_id = %s", (event_id,))
            [(expired,)] = await cur.fetchall()
            return bool(expired)
    finally:
        conn.close()


async def two_proxies(tmp_path: Path, config: dict[str, Any]) -> list[ProxyProcess]:
    path = write_config(tmp_path, config)
    code, _, err = await run_cli("migrate", "--config", str(path))
    assert code == 0, err
    return list(await asyncio.gather(ProxyProcess(path).start(), ProxyProcess(path).start()))


async def test_a_duplicate_storm_over_two_processes_forwards_each_event_once(
    database: str, stub: StubApp, tmp_path: Path,
) -> None:
    ids = [f"evt_storm_{i}" for i in range(4)]
    procs = await two_proxies(tmp_path, base_config(stub.url, database))
    try:
        async with aiohttp.ClientSession() as client:
            bodies = {e: stripe_event(e) for e in ids}
            # 50 copies of each event, each signed separately as real redeliveries are,
            # alternating between the processes, all at once.
            answers = await asyncio.gather(*(
                post(client, procs[i % 2].url + STRIPE, bodies[e], stripe_headers(bodies[e]))
                for i in range(50) for e in ids))
            statuses = [status for status, _, _ in answers]
            assert set(statuses) <= {200, 409, 503}, sorted(set(statuses))
            assert statuses.count(200) >= len(ids)
            for status, headers, _ in answers:
                if status in (409, 503):
                    assert headers["Retry-After"], headers
            assert {e: stub.count(e) for e in ids} == {e: 1 for e in ids}
            assert await rows(database) == {e: ("done", 1) for e in ids}
            # Every later copy, at either process, is the recorded answer, replayed.
            for i, e in enumerate(ids):
                status, headers, _ = await post(client, procs[i % 2].url + STRIPE, bodies[e],
                                                stripe_headers(bodies[e]))
                assert status == 200 and headers["X-Webhook-Sidecar-Replay"] == "true"
        assert {e: stub.count(e) for e in ids} == {e: 1 for e in ids}
    finally:
        for proc in procs:
            await proc.terminate()


async def test_a_process_killed_mid_attempt_is_taken_over_by_exactly_one(
    database: str, stub: StubApp, tmp_path: Path,
) -> None:
    config = base_config(stub.url, database)
    config["providers"]["stripe"]["inflight_wait"] = "200ms"
    config["providers"]["stripe"]["lease"] = "3s"
    config["upstream"]["timeout"] = "2s"
    victim, survivor = await two_proxies(tmp_path, config)
    try:
        body = stripe_event("evt_crash")
        stub.hold.clear()  # the app keeps attempt 1 in flight
        async with aiohttp.ClientSession() as client:
            first = asyncio.create_task(post(client, victim.url + STRIPE, body,
                                             stripe_headers(body)))
            await stub.wait_for(lambda: stub.count("evt_crash") == 1)
            await victim.kill()  # SIGKILL: claimed and forwarded, result never recorded
            with pytest.raises(aiohttp.ClientError):
                await first
            assert await rows(database) == {"evt_crash": ("processing", 1)}

            # The lease is live: a redelivery is neither answered 2xx nor forwarded.
            status, headers, _ = await post(client, survivor.url + STRIPE, body,
                                            stripe_headers(body))
            assert status == 409 and headers["Retry-After"]
            assert stub.count("evt_crash") == 1

            for _ in range(200):  # on the database's clock, until the lease ends (≤ 10 s)
                if await lease_expired(database, "evt_crash"):
                    break
                await asyncio.sleep(0.05)
            else:
                pytest.fail("the crashed attempt's lease never expired")
            stub.hold.set()
            answers = await asyncio.gather(*(
                post(client, survivor.url + STRIPE, body, stripe_headers(body))
                for _ in range(10)))
        statuses = [status for status, _, _ in answers]
        assert statuses.count(200) >= 1 and set(statuses) <= {200, 409}, statuses
        assert stub.attempts("evt_crash") == [1, 2]  # one take-over, marked attempt 2
        assert await rows(database) == {"evt_crash": ("done", 2)}
    finally:
        await survivor.terminate()


@pytest.fixture(scope="module")
def own_server() -> Iterator[ThrowawayServer]:
    """A ``mariadbd`` of this module's own (the test SIGKILLs it), durable across a kill."""
    server = ThrowawayServer(durable=True)
    try:
        server.start()
        yield server
    finally:
        server.cleanup()


async def test_mariadb_killed_mid_run_gives_503_then_recovers(
    own_server: ThrowawayServer, stub: StubApp, tmp_path: Path,
) -> None:
    name = unique_database_name("sidecar_down")
    dsn = await create_database(own_server.dsn, name)
    proc = None
    try:
        config = base_config(stub.url, dsn)
        # A connect to the stopped server is refused at once; the bounds keep each try short.
        config["store"] = {"url": dsn + "?connect_timeout=1", "statement_timeout": "1s"}
        path = write_config(tmp_path, config)
        code, _, err = await run_cli("migrate", "--config", str(path))
        assert code == 0, err
        proc = await ProxyProcess(path).start()
        async with aiohttp.ClientSession() as client:
            url = proc.url + STRIPE
            before = stripe_event("evt_before")
            assert (await post(client, url, before, stripe_headers(before)))[0] == 200

            await asyncio.to_thread(own_server.kill)
            during = stripe_event("evt_during")
            try:
                for _ in range(3):
                    status, headers, _ = await post(client, url, during, stripe_headers(during))
                    assert status == 503 and headers["Retry-After"], (status, headers)
                async with client.get(proc.admin_url + "/readyz") as resp:
                    assert resp.status == 503
                async with client.get(proc.admin_url + "/healthz") as resp:
                    assert resp.status == 200
                assert stub.count("evt_during") == 0
                down = await proc.wait_for_log("store_unavailable")
                assert down["level"] == "error" and down["error"], down
            finally:
                await asyncio.to_thread(own_server.start)
            # Same process, no restart: the dead pooled connections are replaced on use.
            statuses = []
            for _ in range(50):
                status, _, _ = await post(client, url, during, stripe_headers(during))
                statuses.append(status)
                if status == 200:
                    break
                assert status == 503
                await asyncio.sleep(0.1)
            assert statuses[-1] == 200, statuses
            up = await proc.wait_for_log("store_recovered")
            assert up["failed_calls"] >= 3 and up["outage_s"] > 0, up
        assert stub.count("evt_before") == 1 and stub.count("evt_during") == 1
        assert await rows(dsn) == {"evt_before": ("done", 1), "evt_during": ("done", 1)}
    finally:
        if proc is not None:
            await proc.terminate()
        await drop_database(own_server.dsn, name)
