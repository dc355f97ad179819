"""The MySQL / MariaDB store under faults: connections killed (``KILL <id>`` from another
session) while idle and mid-statement, rows another session holds past
``innodb_lock_wait_timeout``, and a server stopped hard (SIGKILL of ``mariadbd``) and restarted
under the proxy. Every store call ends in a value or a ``StoreError`` within its bound, and the
proxy answers 503 + ``Retry-After`` (never a 500) while the store is down.

Kills and lock waits run on the suite's server, each test in its own database and killing only
its own connections; the hard stop runs on a throwaway ``mariadbd`` of this module's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import aiohttp
import asyncmy
import pytest
import structlog

from sidecar.config.loader import parse_config
from sidecar.core.errors import RowLocked, StoreError
from sidecar.core.events import AttemptResult, EventState, Outcome, RecordedResponse
from sidecar.obs.storelog import StoreLog
from sidecar.runtime.serve import start, stop
from sidecar.store.mysql import MySQLStore, migrate_mysql
from tests.mariadbserver import (
    MariaDBBackdoor,
    MariaDBServer,
    ThrowawayServer,
    _connect_args,
    create_database,
    drop_database,
    unique_database_name,
)
from tests.support import STRIPE_SECRET, StubApp, base_config, post, stripe_event, stripe_headers

pytestmark = pytest.mark.mariadb

BODY = b"\x01" * 32
LEASE = 30.0
DONE = AttemptResult(EventState.DONE, Outcome.RESPONSE,
                     RecordedResponse(200, (("Content-Type", "application/json"),), b"{}"), 7.25)


# == a fresh migrated database per test =========================================================


@contextlib.asynccontextmanager
async def migrated(admin_dsn: str) -> AsyncIterator[str]:
    name = unique_database_name("sidecar_faults")
    dsn = await create_database(admin_dsn, name)
    try:
        await migrate_mysql(dsn)
        yield dsn
    finally:
        await drop_database(admin_dsn, name)


@pytest.fixture
async def dsn(mariadb_server: MariaDBServer) -> AsyncIterator[str]:
    async with migrated(mariadb_server.admin_dsn) as url:
        yield url


@contextlib.asynccontextmanager
async def opened(dsn: str, **options: Any) -> AsyncIterator[MySQLStore]:
    store = await MySQLStore.connect(
        dsn, **{"min_size": 1, "max_size": 2, "observer": StoreLog(), **options})
    try:
        yield store
    finally:
        await store.close()


def _database(dsn: str) -> str:
    return dsn.rsplit("/", 1)[1]


async def _admin_rows(dsn: str, sql: str, args: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
    conn = await asyncmy.connect(**_connect_args(dsn))
    try:
        async with conn.cursor() as cur:
            await cur.execute(sql, args)
            return list(await cur.fetchall())
    finally:
        conn.close()


async def connections(dsn: str, *, running: bool = False) -> list[int]:
    """The ids of the connections to this test's own database (never anyone else's);
    ``running``: only those with a statement under way."""
    rows = await _admin_rows(
        dsn, "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = %s"
        " AND ID <> CONNECTION_ID() AND (%s = 0 OR (COMMAND = 'Query' AND INFO IS NOT NULL))",
        (_database(dsn), int(running)))
    return [int(r[0]) for r in rows]


async def kill(dsn: str, ids: list[int]) -> None:
    for conn_id in ids:
        with contextlib.suppress(asyncmy.errors.Error):  # gone already
            await _admin_rows(dsn, f"KILL {int(conn_id)}")


async def until(condition: Callable[[], Awaitable[bool]], what: str, tries: int = 500) -> None:
    """A bounded poll on a condition (≤ 5 s), not a sleep used as a barrier."""
    for _ in range(tries):
        if await condition():
            return
        await asyncio.sleep(0.01)
    pytest.fail(f"never: {what}")


async def timed(call: Awaitable[Any]) -> tuple[float, Any]:
    started = time.monotonic()
    try:
        value = await call
    except StoreError as exc:
        value = exc
    return time.monotonic() - started, value


# == connections killed =========================================================================


async def test_pooled_connections_killed_while_idle_serve_the_next_calls(dsn: str) -> None:
    async with opened(dsn) as store:
        await store.claim("stripe", "evt_expired", BODY, 0, "crashed")
        steps: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
            ("get", lambda: store.get("stripe", "evt_expired")),
            ("claim", lambda: store.claim("stripe", "evt_1", BODY, LEASE, "proxy")),
            ("take_over", lambda: store.take_over("stripe", "evt_expired", LEASE, "proxy")),
            ("complete", lambda: store.complete("stripe", "evt_1", 1, DONE)),
            ("ping", store.ping),
        ]
        results = {}
        for name, call in steps:
            ids = await connections(dsn)
            assert ids, "the pool had a connection to kill"
            await kill(dsn, ids)

            async def gone(ids: list[int] = ids) -> bool:
                return not set(ids) & set(await connections(dsn))

            await until(gone, "the killed connections are gone")
            results[name] = await call()
        assert results["get"] is not None and results["get"].attempt == 1
        assert results["claim"].won
        assert results["take_over"] == 2
        assert results["complete"] is True
        row = await store.get("stripe", "evt_1")
        assert row is not None and (row.state, row.response) == (EventState.DONE, DONE.response)


async def test_a_result_write_killed_mid_statement_fails_alone_and_is_written_again(
    dsn: str,
) -> None:
    backdoor = MariaDBBackdoor(dsn)
    async with opened(dsn, lock_timeout=10.0, statement_timeout=15.0) as store:
        await store.claim("stripe", "evt_1", BODY, LEASE, "proxy")
        async with backdoor.hold_write_lock("stripe", "evt_1"):
            write = asyncio.create_task(timed(store.complete("stripe", "evt_1", 1, DONE)))

            async def waiting() -> bool:
                return bool(await connections(dsn, running=True))

            await until(waiting, "the result write waits for the row lock")
            await kill(dsn, await connections(dsn, running=True))
            took, value = await write
        # Killed mid-statement: a StoreError at once (its transaction rolled back by the
        # server), not the lock wait's 10 s, and not another exception.
        assert isinstance(value, StoreError) and not isinstance(value, RowLocked), value
        assert took < 5.0, took
        row = await store.get("stripe", "evt_1")
        assert row is not None and row.state is EventState.PROCESSING, "nothing was written"
        # The pool serves on; the repeated write (as the forwarder retries it) is recorded once.
        assert await store.complete("stripe", "evt_1", 1, DONE) is True
        assert [(a.attempt, a.state) for a in await store.attempts("stripe", "evt_1")] == [
            (1, EventState.DONE)]


# == rows another session holds ==================================================================


async def test_a_row_held_past_the_lock_wait_timeout_is_row_locked_within_its_bound(
    dsn: str,
) -> None:
    backdoor = MariaDBBackdoor(dsn)
    async with opened(dsn, lock_timeout=1.0, statement_timeout=5.0) as store:
        await store.claim("stripe", "evt_1", BODY, 0, "crashed")
        await store.claim("stripe", "evt_2", BODY, LEASE, "proxy")
        async with backdoor.hold_write_lock("stripe", "evt_1"), \
                backdoor.hold_write_lock("stripe", "evt_2"):
            took, taken = await timed(store.take_over("stripe", "evt_1", LEASE, "proxy"))
            wrote, written = await timed(store.complete("stripe", "evt_2", 1, DONE))
            # A read takes no lock: it answers while the rows are held.
            read = await store.get("stripe", "evt_2")
        # innodb_lock_wait_timeout (1 s, whole seconds) ends the wait: RowLocked, as on
        # PostgreSQL, which the proxy answers as "in flight", not as an outage.
        assert isinstance(taken, RowLocked) and 0.9 < took < 3.0, (took, taken)
        assert isinstance(written, RowLocked) and 0.9 < wrote < 3.0, (wrote, written)
        assert read is not None and read.state is EventState.PROCESSING
        row = await store.get("stripe", "evt_1")
        assert row is not None and row.attempt == 1, "nothing was written"
        assert await store.take_over("stripe", "evt_1", LEASE, "proxy") == 2
        assert await store.complete("stripe", "evt_2", 1, DONE) is True


# == the server stopped hard, under the proxy ===================================================


@pytest.fixture(scope="module")
def own_server() -> Iterator[ThrowawayServer]:
    """A ``mariadbd`` of this module's own (these tests SIGKILL it), durable across a kill."""
    server = ThrowawayServer(durable=True)
    try:
        server.start()
        yield server
    finally:
        server.cleanup()


@pytest.fixture
async def own_dsn(own_server: ThrowawayServer) -> AsyncIterator[str]:
    async with migrated(own_server.dsn) as url:
        yield url


@pytest.fixture
async def stub() -> AsyncIterator[StubApp]:
    app = await StubApp().start()
    try:
        yield app
    finally:
        await app.stop()


@contextlib.asynccontextmanager
async def proxy(dsn: str, stub: StubApp, lease: str = "10s") -> AsyncIterator[str]:
    """The proxy in-process on a real MySQLStore; yields the stripe route's URL."""
    async with opened(dsn, max_size=4, acquire_timeout=0.5, statement_timeout=1.0,
                      connect_timeout=1.0) as store:
        data = base_config(stub.url, dsn)
        data["providers"]["stripe"]["lease"] = lease
        running = await start(parse_config(data, env={}), store=store)
        try:
            yield f"http://{running.listen}/webhooks/stripe"
        finally:
            await stop(running)


async def deliver(client: aiohttp.ClientSession, url: str, event_id: str,
                  ) -> tuple[int, dict[str, str]]:
    body = stripe_event(event_id)
    status, headers, _ = await post(client, url, body, stripe_headers(body, STRIPE_SECRET))
    return status, headers


async def test_a_server_killed_hard_is_answered_503_then_the_proxy_recovers(
    own_server: ThrowawayServer, own_dsn: str, stub: StubApp,
) -> None:
    """mariadbd is SIGKILLed while six deliveries are at the app: their answers are relayed
    once the server is back (the result writes retried within the lease), new deliveries get
    503 + Retry-After meanwhile, and every event reaches the app once."""
    ids = [f"evt_{i}" for i in range(6)]
    async with proxy(own_dsn, stub) as url, aiohttp.ClientSession() as client:
        assert (await deliver(client, url, "evt_before"))[0] == 200
        stub.hold.clear()
        in_flight = [asyncio.create_task(deliver(client, url, e)) for e in ids]
        await stub.wait_for(lambda: stub.count() == 1 + len(ids))
        await asyncio.to_thread(own_server.kill)
        try:
            with structlog.testing.capture_logs() as logs:
                stub.hold.set()  # the app answers; the result writes meet a server that is gone

                async def retrying() -> bool:
                    return {e.get("event_id") for e in logs
                            if e["event"] == "record_retrying"} >= set(ids)

                await until(retrying, "every result write failed and is retried", tries=1000)
                for _ in range(3):
                    status, headers = await deliver(client, url, "evt_down")
                    assert status == 503 and headers["Retry-After"], (status, headers)
        finally:
            await asyncio.to_thread(own_server.start)
        answers = await asyncio.gather(*in_flight)
        statuses = []
        for _ in range(50):  # the provider's retries, until the pool serves again
            status, _ = await deliver(client, url, "evt_down")
            statuses.append(status)
            if status != 503:
                break
            await asyncio.sleep(0.1)
        assert statuses[-1] == 200 and set(statuses) <= {200, 503}, statuses
    assert [status for status, _ in answers] == [200] * len(ids)
    rows = await _admin_rows(own_dsn, f"SELECT event_id, state, attempt FROM "
                                      f"`{_database(own_dsn)}`.webhook_event")
    assert {r[0].decode(): (r[1], r[2]) for r in rows} == {
        e: ("done", 1) for e in ["evt_before", "evt_down", *ids]}
    assert all(stub.count(e) == 1 for e in ["evt_before", "evt_down", *ids])
