"""The PostgreSQL store under faults: backends terminated while idle or mid-statement, answers
lost after a commit, a hung server, rows locked by another session, a server crash. Every store
call ends in a value or a ``StoreError`` within its bound, never another exception, and a write
whose answer was lost is recognised when it is repeated.

Everything runs against one private cluster per module (``tests/pgserver.py``), never the
shared server: these tests pause, crash and kill it. Each test gets a fresh database on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import asyncpg
import pytest
import structlog
from aiohttp import web

from sidecar.config.loader import parse_config
from sidecar.config.model import ProviderConfig
from sidecar.core.errors import RowLocked, StoreError
from sidecar.core.events import (
    AttemptResult,
    EventState,
    Outcome,
    Recorded,
    RecordedResponse,
    StoredRequest,
)
from sidecar.forwarding.forwarder import Forwarder
from sidecar.obs.metrics import Metrics
from sidecar.obs.storelog import StoreLog
from sidecar.runtime.serve import start, stop
from sidecar.runtime.testing import FakeUpstream
from sidecar.store.postgres import PostgresStore
from tests.pgserver import (
    ThrowawayCluster,
    migrated_database,
)
from tests.replyeater import ReplyEater
from tests.support import (
    STRIPE_SECRET,
    Seen,
    StubApp,
    base_config,
    post,
    stripe_event,
    stripe_headers,
)

pytestmark = pytest.mark.postgres

APP = "webhook-sidecar"  # the store's application_name: how its backends are told apart
BODY = b"\x01" * 32
LEASE = 30.0
REQUEST = StoredRequest("POST", "/", (), b"{}")  # what a forward sends
DONE = AttemptResult(EventState.DONE, Outcome.RESPONSE,
                     RecordedResponse(200, (("Content-Type", "application/json"),), b"{}"), 7.25)


# == one private cluster per module, a fresh database per test ===============================


@pytest.fixture
async def dsn(cluster: ThrowawayCluster) -> AsyncIterator[str]:
    async with migrated_database(cluster, "faults") as url:
        yield url


@contextlib.asynccontextmanager
async def opened(dsn: str, **options: Any) -> AsyncIterator[PostgresStore]:
    store = await PostgresStore.connect(
        dsn, **{"min_size": 1, "max_size": 1, "observer": StoreLog(), **options})
    try:
        yield store
    finally:
        await store.close()


@contextlib.asynccontextmanager
async def admin(dsn: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(dsn, server_settings={"application_name": "faults-test"})
    try:
        yield conn
    finally:
        await conn.close()


async def store_backends(conn: asyncpg.Connection, *, waiting: bool = False) -> list[int]:
    """The store's backends in this test's own database (never anyone else's); ``waiting``:
    only those waiting for a lock. Read afresh also inside a transaction (which would otherwise
    keep showing the activity as it was at its first read)."""
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    rows = await conn.fetch(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        " AND application_name = $1 AND ($2 = false OR wait_event_type = 'Lock')",
        APP, waiting)
    return [r["pid"] for r in rows]


async def until(condition: Callable[[], Awaitable[bool]], what: str, tries: int = 300) -> None:
    """A bounded poll on a condition (≤ 3 s), not a sleep used as a barrier."""
    for _ in range(tries):
        if await condition():
            return
        await asyncio.sleep(0.01)
    pytest.fail(f"never: {what}")


async def terminate_store_backends(conn: asyncpg.Connection) -> list[int]:
    """pg_terminate_backend on the store's backends, returned once they are gone."""
    pids = await store_backends(conn)
    for pid in pids:
        await conn.execute("SELECT pg_terminate_backend($1)", pid)

    async def gone() -> bool:
        return not set(pids) & set(await store_backends(conn))

    await until(gone, "the terminated backends are gone")
    return pids


async def timed(call: Awaitable[Any]) -> tuple[float, Any]:
    """How long ``call`` took, and its value or the StoreError it raised."""
    started = time.monotonic()
    try:
        value = await call
    except StoreError as exc:
        value = exc
    return time.monotonic() - started, value


@contextlib.asynccontextmanager
async def row_locked(dsn: str, *event_ids: str) -> AsyncIterator[asyncpg.Connection]:
    """Another session holds ``SELECT … FOR UPDATE`` on these rows of stripe."""
    async with admin(dsn) as conn, conn.transaction():
        locked = await conn.fetch("SELECT event_id FROM webhook_event WHERE provider = 'stripe'"
                                  " AND event_id = ANY($1::text[]) FOR UPDATE", list(event_ids))
        assert len(locked) == len(event_ids)
        yield conn


# == a backend that died ======================================================================


async def test_a_pooled_connection_whose_backend_died_while_idle_serves_the_next_call(
    dsn: str,
) -> None:
    async with opened(dsn) as store, admin(dsn) as conn:
        await store.claim("stripe", "evt_expired", BODY, 0, "crashed")
        # The one pooled connection's backend is killed while idle before each call: the call
        # answers as if nothing happened (a new connection), whatever it is.
        steps: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
            ("get", lambda: store.get("stripe", "evt_expired")),
            ("claim", lambda: store.claim("stripe", "evt_1", BODY, LEASE, "proxy")),
            ("take_over", lambda: store.take_over("stripe", "evt_expired", LEASE, "proxy")),
            ("complete", lambda: store.complete("stripe", "evt_1", 1, DONE)),
            ("ping", store.ping),
        ]
        results = {}
        for name, call in steps:
            assert await terminate_store_backends(conn), "the pool had a connection to kill"
            results[name] = await call()
        assert results["get"] is not None and results["get"].attempt == 1
        assert results["claim"].won
        assert results["take_over"] == 2
        assert results["complete"] is True
        row = await store.get("stripe", "evt_1")
        assert row is not None and (row.state, row.response) == (EventState.DONE, DONE.response)


async def test_a_statement_whose_backend_is_killed_mid_call_is_repeated_on_a_new_connection(
    dsn: str,
) -> None:
    async with opened(dsn, max_size=2) as store, admin(dsn) as conn:
        await store.claim("stripe", "evt_1", BODY, LEASE, "proxy")
        async with conn.transaction():
            # The result write waits for the table (its statement's first lock)...
            await conn.execute("LOCK TABLE webhook_event IN ACCESS EXCLUSIVE MODE")
            write = asyncio.create_task(store.complete("stripe", "evt_1", 1, DONE))

            async def waiting() -> bool:
                return bool(await store_backends(conn, waiting=True))

            await until(waiting, "the result write waits for the table lock")
            first = await store_backends(conn, waiting=True)
            # ...its backend is killed there (the write never ran), and it is repeated.
            await conn.execute("SELECT pg_terminate_backend($1)", first[0])

            async def repeated() -> bool:
                return bool(set(await store_backends(conn, waiting=True)) - set(first))

            await until(repeated, "the result write is repeated on another connection")
        assert await write is True
        row = await store.get("stripe", "evt_1")
        assert row is not None and row.state is EventState.DONE


# == an answer lost after the commit ===========================================================


@pytest.mark.parametrize("verb", ["claim", "take_over", "complete"])
async def test_a_write_whose_answer_was_lost_is_recognised_when_repeated(
    dsn: str, eater: ReplyEater, verb: str,
) -> None:
    # Through the relay; no statement cache, so each statement's text is on the wire.
    async with opened(eater.relayed(dsn), max_size=2, statement_cache_size=0) as store:
        if verb == "take_over":
            await store.claim("stripe", "evt_1", BODY, 0, "crashed")  # lease already expired
        elif verb == "complete":
            await store.claim("stripe", "evt_1", BODY, LEASE, "proxy")
        eater.arm({"claim": b"INSERT INTO webhook_event",
                   "take_over": b"attempt = attempt + 1",
                   "complete": b"latency_ms = $"}[verb])
        # A plain repeat would answer "lost" / "someone else took it" / "superseded".
        if verb == "claim":
            claim = await store.claim("stripe", "evt_1", BODY, LEASE, "proxy")
            assert claim.won and claim.row.attempt == 1
        elif verb == "take_over":
            assert await store.take_over("stripe", "evt_1", LEASE, "proxy") == 2
        else:
            assert await store.complete("stripe", "evt_1", 1, DONE) is True
        assert eater.fired.is_set(), "the first run's answer was swallowed"
        row = await store.get("stripe", "evt_1")
        timeline = [(a.attempt, a.state) for a in await store.attempts("stripe", "evt_1")]
    assert row is not None
    expected = {"claim": (EventState.PROCESSING, 1), "take_over": (EventState.PROCESSING, 2),
                "complete": (EventState.DONE, 1)}[verb]
    assert (row.state, row.attempt) == expected
    # The repeated result write records its attempt once (the first run's record).
    assert timeline == ([(1, EventState.DONE)] if verb == "complete" else [])


async def test_a_release_whose_answer_was_lost_is_not_repeated_over_a_newer_attempt(
    dsn: str, eater: ReplyEater,
) -> None:
    # release has no attempt fence: repeated after a redelivery took the released row over,
    # it would release that newer, live attempt. So its lost answer is a StoreError, and the
    # operator runs it again knowingly.
    async with opened(eater.relayed(dsn), max_size=2, statement_cache_size=0) as store:
        await store.claim("stripe", "evt_1", BODY, LEASE, "stuck")
        eater.arm(b"state IN")
        with pytest.raises(StoreError):
            await store.release("stripe", "evt_1", force=True)
        assert eater.fired.is_set(), "the release committed and its answer was lost"
        # A redelivery takes the released row over: a later release must be an explicit act.
        assert await store.take_over("stripe", "evt_1", LEASE, "proxy") == 2
        row = await store.get("stripe", "evt_1")
    assert row is not None and row.state is EventState.PROCESSING and row.lease_live


# == a hung server ============================================================================


async def test_calls_to_a_hung_server_end_in_store_error_within_the_deadline(
    cluster: ThrowawayCluster, dsn: str,
) -> None:
    # The statement is cancelled at the deadline, while the server cannot confirm the cancel:
    # its connection is closed, not given back to the pool (where releasing it used to time
    # out and end in a 500).
    async with opened(dsn, max_size=2, statement_timeout=0.8, acquire_timeout=0.5,
                      command_timeout=5.0) as store:
        await store.claim("stripe", "evt_1", BODY, LEASE, "proxy")
        await asyncio.gather(store.ping(), store.ping())  # two pooled connections
        with cluster.paused():
            results = await asyncio.gather(
                timed(store.get("stripe", "evt_1")),
                timed(store.complete("stripe", "evt_1", 1, DONE)),
                timed(store.claim("stripe", "evt_2", BODY, LEASE, "proxy")),
            )
        for seconds, value in results:
            assert isinstance(value, StoreError), value
            assert seconds < 0.8 + 0.3, seconds
        assert await store.complete("stripe", "evt_1", 1, DONE) is True  # the pool recovered


# == rows another session holds ===============================================================


async def test_a_takeover_of_a_locked_row_gives_up_at_once_with_row_locked(dsn: str) -> None:
    async with opened(dsn, max_size=2, lock_timeout=5.0) as store:
        await store.claim("stripe", "evt_1", BODY, 0, "crashed")
        await store.claim("stripe", "evt_2", BODY, LEASE, "proxy")
        async with row_locked(dsn, "evt_1", "evt_2"):
            took, taken = await timed(store.take_over("stripe", "evt_1", LEASE, "proxy"))
            wrote, written = await timed(store.complete("stripe", "evt_2", 1, DONE))
        assert isinstance(taken, RowLocked) and took < 0.5, (took, taken)
        assert isinstance(written, RowLocked) and wrote < 0.5, (wrote, written)
        row = await store.get("stripe", "evt_1")
        assert row is not None and row.attempt == 1, "nothing was written"
        assert await store.take_over("stripe", "evt_1", LEASE, "proxy") == 2


async def test_four_locked_rows_leave_a_pool_of_four_serving_other_rows(dsn: str) -> None:
    locked = [f"evt_locked_{i}" for i in range(4)]
    async with opened(dsn, max_size=4, min_size=4, acquire_timeout=0.5,
                      lock_timeout=3.0) as store:
        for event_id in locked:
            await store.claim("stripe", event_id, BODY, 0, "crashed")
        async with row_locked(dsn, *locked):
            started = time.monotonic()
            takeovers = [timed(store.take_over("stripe", e, LEASE, "proxy")) for e in locked]
            others = [timed(store.claim("github", f"evt_{i}", BODY, LEASE, "proxy"))
                      for i in range(12)]
            results = await asyncio.gather(*takeovers, *others)
            elapsed = time.monotonic() - started
        assert all(isinstance(value, RowLocked) for _, value in results[:4]), results[:4]
        assert all(value.won for _, value in results[4:]), results[4:]
        assert elapsed < 1.0, elapsed  # before: every call waited for lock_timeout (3 s)


async def test_the_deadline_bounds_a_call_waiting_for_two_locks(dsn: str) -> None:
    # PostgreSQL's lock_timeout applies per lock: a statement queued behind another waiter
    # waits for the row's tuple lock, then for the holder's transaction — twice lock_timeout.
    # The store's deadline (statement_timeout) bounds the whole call, on the client's side: here
    # the server has no statement_timeout at all, as behind pgbouncer with the timeouts on the
    # role (session_settings: false) and only a lock_timeout.
    async with admin(dsn) as conn:
        database = await conn.fetchval("SELECT current_database()")
        await conn.execute(f'ALTER DATABASE "{database}" SET lock_timeout = \'1s\'')
    async with opened(dsn, max_size=2, session_settings=False, statement_timeout=1.3) as store, \
            admin(dsn) as conn:
        await store.claim("stripe", "evt_1", BODY, LEASE, "proxy")
        async with row_locked(dsn, "evt_1"):
            # release: an operator's update, waiting with the session's lock_timeout.
            first = asyncio.create_task(timed(store.release("stripe", "evt_1", force=True)))

            async def waiting() -> bool:
                return bool(await store_backends(conn, waiting=True))

            await until(waiting, "the first release waits for the row")
            second_took, second = await timed(store.release("stripe", "evt_1", force=True))
            first_took, first_value = await first
        assert isinstance(first_value, StoreError) and first_took < 1.3, (first_took, first_value)
        assert isinstance(second, StoreError), second
        assert second_took < 1.3 + 0.3, second_took  # not ~2 s (twice lock_timeout)


# == the result write, through the forwarder ==================================================


def _forwarder(store: PostgresStore) -> Forwarder:
    return Forwarder(store, FakeUpstream(), Metrics(), set())


def _stripe(lease: str) -> ProviderConfig:
    data = base_config("http://127.0.0.1:9", "sqlite:///unused.db")
    data["providers"]["stripe"]["lease"] = lease
    data["upstream"]["timeout"] = "1s"
    provider = parse_config(data, env={}).provider("stripe")
    assert provider is not None
    return provider


async def test_a_result_write_meeting_a_locked_row_is_retried_until_it_is_recorded(
    dsn: str,
) -> None:
    async with opened(dsn, max_size=2) as store:
        await store.claim("stripe", "evt_1", BODY, LEASE, "proxy")
        with structlog.testing.capture_logs() as logs:
            async with row_locked(dsn, "evt_1") as holder:
                forward = asyncio.create_task(_forwarder(store).forward(
                    _stripe("30s"), [("evt_1", 1)], REQUEST))

                async def retrying() -> bool:
                    return any(e["event"] == "record_retrying" for e in logs)

                await until(retrying, "the result write meets the lock and is retried")
                assert not forward.done() and not holder.is_closed()
            done = await forward  # the lock is gone: the next try records the result
        assert done.recorded is Recorded.WRITTEN and done.record_error is None
        assert [e["event"] for e in logs if e["event"].startswith("record_")] == [
            "record_retrying", "record_recovered"]
        row = await store.get("stripe", "evt_1")
        assert row is not None and row.state is EventState.DONE


async def test_a_result_write_is_not_retried_past_the_lease(dsn: str) -> None:
    async with opened(dsn, max_size=2) as store:
        await store.claim("stripe", "evt_1", BODY, 2.5, "proxy")
        async with row_locked(dsn, "evt_1"):
            took, done = await timed(_forwarder(store).forward(
                _stripe("2500ms"), [("evt_1", 1)], REQUEST))
            row = await store.get("stripe", "evt_1")  # a read does not wait for the lock
        # The retries stop a second before the lease ends, whatever the lock does. (A try cut
        # off then may still commit once the lock goes, before the server sees its cancel:
        # fenced by the attempt, like any late write.)
        assert done.recorded is Recorded.FAILED and "locked" in (done.record_error or ""), done
        assert 1.0 < took < 2.0, took
        assert row is not None and row.state is EventState.PROCESSING


# == through the HTTP proxy: never a 500 ======================================================


@contextlib.asynccontextmanager
async def proxy(dsn: str, stub: StubApp, lease: str = "4s") -> AsyncIterator[str]:
    """The proxy in-process on a real PostgresStore; yields the stripe route's URL."""
    async with opened(dsn, max_size=4, acquire_timeout=0.5, statement_timeout=1.0) as store:
        data = base_config(stub.url, dsn)
        data["providers"]["stripe"]["lease"] = lease
        config = parse_config(data, env={})
        running = await start(config, store=store)
        try:
            yield f"http://{running.listen}/webhooks/stripe"
        finally:
            await stop(running)


@pytest.fixture
async def stub() -> AsyncIterator[StubApp]:
    app = await StubApp().start()
    try:
        yield app
    finally:
        await app.stop()


async def deliver(client: aiohttp.ClientSession, url: str, event_id: str,
                  ) -> tuple[int, dict[str, str]]:
    body = stripe_event(event_id)
    status, headers, _ = await post(client, url, body, stripe_headers(body, STRIPE_SECRET))
    return status, headers


async def test_a_hung_or_crashed_database_is_answered_503_with_retry_after_never_500(
    cluster: ThrowawayCluster, dsn: str, stub: StubApp,
) -> None:
    async with proxy(dsn, stub) as url, aiohttp.ClientSession() as client:
        assert (await deliver(client, url, "evt_before"))[0] == 200
        with cluster.paused():
            status, headers = await deliver(client, url, "evt_hung")
        assert status == 503 and headers["Retry-After"] == "5"

        await asyncio.to_thread(cluster.stop, "immediate")
        try:
            status, headers = await deliver(client, url, "evt_down")
            assert status == 503 and "Retry-After" in headers
        finally:
            await asyncio.to_thread(cluster.start)
        statuses = []
        for _ in range(30):  # the provider's retries, until the pool serves again
            status, _ = await deliver(client, url, "evt_down")
            statuses.append(status)
            if status != 503:
                break
            await asyncio.sleep(0.1)
        assert statuses[-1] == 200 and set(statuses) <= {200, 503}, statuses
        assert stub.count("evt_hung") == 0 and stub.count("evt_down") == 1


async def test_a_duplicate_this_process_knows_is_answered_while_the_database_is_down(
    cluster: ThrowawayCluster, dsn: str, stub: StubApp,
) -> None:
    """A done event never changes until retention: its duplicates are answered from the
    process's memory (``answer_cache``), with no round trip — even with the database gone."""
    async with proxy(dsn, stub) as url, aiohttp.ClientSession() as client:
        assert (await deliver(client, url, "evt_known"))[0] == 200
        await asyncio.to_thread(cluster.stop, "immediate")
        try:
            status, headers = await deliver(client, url, "evt_known")
            assert status == 200 and headers["X-Webhook-Sidecar-Replay"] == "true"
            assert (await deliver(client, url, "evt_unknown"))[0] == 503
        finally:
            await asyncio.to_thread(cluster.start)
    assert stub.count("evt_known") == 1 and stub.count("evt_unknown") == 0


async def test_a_database_restart_under_load_still_records_the_answers_in_flight(
    cluster: ThrowawayCluster, dsn: str, stub: StubApp,
) -> None:
    """The database crashes while six deliveries are at the app: their answers are relayed once
    the app gives them, and their result writes, failing at first, are retried until the
    database is back, well within the lease. New deliveries meanwhile get 503."""
    ids = [f"evt_{i}" for i in range(6)]
    async with proxy(dsn, stub, lease="10s") as url, aiohttp.ClientSession() as client:
        stub.hold.clear()
        in_flight = [asyncio.create_task(deliver(client, url, e)) for e in ids]
        await stub.wait_for(lambda: stub.count() == len(ids))
        await asyncio.to_thread(cluster.stop, "immediate")
        try:
            with structlog.testing.capture_logs() as logs:
                stub.hold.set()  # the app answers; the writes meet a database that is gone

                async def retrying() -> bool:
                    return sum(e["event"] == "record_retrying" for e in logs) == len(ids)

                await until(retrying, "every result write failed and is retried")
                status, headers = await deliver(client, url, "evt_new")
                assert status == 503 and "Retry-After" in headers
        finally:
            await asyncio.to_thread(cluster.start)
        answers = await asyncio.gather(*in_flight)
    assert [status for status, _ in answers] == [200] * len(ids)
    async with admin(dsn) as conn:
        rows = await conn.fetch("SELECT event_id, state, attempt FROM webhook_event")
    assert {r["event_id"]: (r["state"], r["attempt"]) for r in rows} == {
        e: ("done", 1) for e in ids}
    assert stub.count() == len(ids) and stub.count("evt_new") == 0


async def test_an_answer_that_cannot_be_recorded_within_the_lease_is_503_then_taken_over(
    cluster: ThrowawayCluster, dsn: str, stub: StubApp,
) -> None:
    """The remaining window: the database stays down past the attempt's lease. The app's 2xx is
    not relayed (it would leave the row `processing` for good); the provider comes back, and
    after the lease the event is taken over and forwarded again, marked attempt 2."""
    async with proxy(dsn, stub, lease="2500ms") as url, aiohttp.ClientSession() as client:
        stub.hold.clear()
        first = asyncio.create_task(deliver(client, url, "evt_1"))
        await stub.wait_for(lambda: stub.count() == 1)
        await asyncio.to_thread(cluster.stop, "immediate")
        try:
            stub.hold.set()
            started = time.monotonic()
            status, headers = await first  # retried for lease - 1 s = 1.5 s, then given up
            assert status == 503 and headers["Retry-After"] == "5"
            # Retried for lease - 1 s, then given up; the last try's connect may run past
            # the window (1.4-2.2 s on a quiet machine before and after 2026-12-02, 2.55 s
            # once in CI): bounded, not endless.
            assert 1.0 < time.monotonic() - started < 3.5
        finally:
            await asyncio.to_thread(cluster.start)
        statuses = []
        for _ in range(60):  # the provider's retries: 503, 409 while the lease lasts, then 200
            status, headers = await deliver(client, url, "evt_1")
            statuses.append(status)
            if status == 200:
                break
            await asyncio.sleep(0.1)
        assert statuses[-1] == 200 and headers["X-Webhook-Sidecar-Attempt"] == "2", statuses
        assert set(statuses) <= {200, 409, 503}, statuses
    assert stub.attempts("evt_1") == [1, 2]
    async with admin(dsn) as conn:
        row = await conn.fetchrow("SELECT state, attempt FROM webhook_event")
    assert (row["state"], row["attempt"]) == ("done", 2)


async def test_backends_killed_while_the_app_works_leave_no_row_processing(
    dsn: str, stub: StubApp,
) -> None:
    """The reported failure: the app answered 200, the provider was told 200, and the row
    stayed `processing`, because the pooled connection the result write took had died while
    idle. Here every app call kills all the store's backends before answering: one delivery at
    a time (each result write meets a dead connection), then eight at once (the kills also
    land in the middle of other deliveries' claims and writes)."""
    async with admin(dsn) as conn:
        one_at_a_time = asyncio.Lock()  # the app's calls share one admin connection

        async def kill_then_answer(seen: Seen) -> web.StreamResponse:
            async with one_at_a_time:
                await terminate_store_backends(conn)
            return web.json_response({"ok": True})

        stub.behaviour = kill_then_answer
        one_by_one = [f"evt_seq_{i}" for i in range(3)]
        at_once = [f"evt_par_{i}" for i in range(8)]
        async with proxy(dsn, stub) as url, aiohttp.ClientSession() as client:
            sequential = [(await deliver(client, url, e))[0] for e in one_by_one]
            concurrent = [status for status, _ in await asyncio.gather(
                *(deliver(client, url, e) for e in at_once))]
        assert sequential == [200] * 3
        assert set(concurrent) <= {200, 409, 503}, concurrent  # never a 500
        assert concurrent.count(200) >= 1
        rows = {r["event_id"]: r["state"] for r in
                await conn.fetch("SELECT event_id, state FROM webhook_event")}
        answered = one_by_one + [e for e, s in zip(at_once, concurrent, strict=True) if s == 200]
        assert {e: rows.get(e) for e in answered} == {e: "done" for e in answered}
        assert all(stub.count(e) <= 1 for e in one_by_one + at_once)


# == an outage, logged once ===================================================================


class _Kept(logging.Handler):
    """The records that pass a logger's filters."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


async def test_an_outage_is_logged_once_with_the_driver_traceback_and_its_end_once(
    cluster: ThrowawayCluster, dsn: str,
) -> None:
    pool_log, kept = logging.getLogger("asyncpg.pool"), _Kept()
    pool_log.addHandler(kept)
    try:
        async with opened(dsn, max_size=2) as store:
            assert await store.get("stripe", "evt_none") is None
            with structlog.testing.capture_logs() as logs:
                await asyncio.to_thread(cluster.stop, "immediate")
                try:
                    for i in range(5):  # deliveries during the outage: each fails
                        with pytest.raises(StoreError):
                            await store.get("stripe", f"evt_{i}")
                    # The pool's own reconnect warnings are muted while it lasts.
                    pool_log.warning("a reconnect warning while down")
                    pool_log.error("an error still gets through")
                finally:
                    await asyncio.to_thread(cluster.start)
                for _ in range(100):  # bounded: until the restarted server answers
                    with contextlib.suppress(StoreError):
                        await store.get("stripe", "evt_after")
                        break
                    await asyncio.sleep(0.05)
            pool_log.warning("after the outage: logged again")
    finally:
        pool_log.removeHandler(kept)
    events = [entry["event"] for entry in logs]
    assert events.count("store_unavailable") == 1 and events.count("store_recovered") == 1
    [down] = [entry for entry in logs if entry["event"] == "store_unavailable"]
    assert down["log_level"] == "error" and isinstance(down["exc_info"], BaseException)
    [up] = [entry for entry in logs if entry["event"] == "store_recovered"]
    assert up["failed_calls"] >= 5 and up["outage_s"] > 0
    messages = [r.getMessage() for r in kept.records]
    assert "a reconnect warning while down" not in messages
    assert "an error still gets through" in messages
    assert messages[-1] == "after the outage: logged again"
