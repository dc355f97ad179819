"""One contract for every ``Store``, run against real SQLite, real PostgreSQL and the
in-memory store that users' tests may use in their place.

Each test in the first part takes the parametrized ``store`` fixture ([sqlite], [postgres] and
[memory]; this module extends conftest's). A few store-specific tests follow (unreachable
database, server restart, two processes sharing one SQLite file, the memory store's clock).
Nothing here sleeps to synchronise: concurrency is real (``asyncio.gather`` over a pool of
several connections), and expired leases are made with ``lease_seconds=0`` instead of waiting.
"""

from __future__ import annotations

import asyncio
import doctest
import hashlib
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from sidecar.core.errors import StoreError
from sidecar.core.events import (
    AttemptResult,
    Claim,
    EventRow,
    EventState,
    Outcome,
    RecordedResponse,
    StoredRequest,
)
from sidecar.core.ports import Store
from sidecar.store.memory import MemoryStore
from sidecar.store.memory import store as memory_module
from sidecar.store.postgres import PostgresStore, migrate_postgres
from sidecar.store.rows import Params
from sidecar.store.sqlite import SQLiteStore
from tests.backdoor import Backdoor, PgBackdoor, SqliteBackdoor, pg_backdoor
from tests.pgserver import ThrowawayCluster, free_port

LEASE = 30.0
BODY = hashlib.sha256(b'{"id": "evt_1"}').digest()
OTHER_BODY = hashlib.sha256(b'{"id": "evt_1", "tampered": true}').digest()

DONE_200 = AttemptResult(
    state=EventState.DONE,
    outcome=Outcome.RESPONSE,
    response=RecordedResponse(
        status=200,
        headers=(("Content-Type", "application/json"), ("X-Trace", "a"), ("X-Trace", "b")),
        body=b'{"ok": true}',
    ),
    latency_ms=12.5,
)
FAILED_503 = AttemptResult(
    state=EventState.FAILED,
    outcome=Outcome.RESPONSE,
    response=RecordedResponse(status=503, headers=(), body=b"busy"),
    latency_ms=3.0,
)
FAILED_TIMEOUT = AttemptResult(
    state=EventState.FAILED, outcome=Outcome.TIMEOUT, response=None, latency_ms=10_000.0
)


# == the stores under contract ===============================================================


@pytest.fixture
def store(every_store: Store) -> Store:
    return every_store


class MemoryBackdoor(Backdoor):
    """Ages a row of a ``MemoryStore`` in place; holds a row as another session would."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    async def backdate(self, provider: str, event_id: str, seconds: float) -> None:
        self.store._events[(provider, event_id)].received_at -= seconds

    def hold_write_lock(self, provider: str, event_id: str) -> AbstractAsyncContextManager[None]:
        return self.store.hold_row(provider, event_id)

    async def backdate_nonces(self, provider: str, seconds: float) -> None:
        for key, (bound, received_at) in list(self.store._nonces.items()):
            if key[0] == provider:
                self.store._nonces[key] = (bound, received_at - seconds)

    async def impatient_store(self) -> Store:
        return _Unclosed(self.store)  # the same rows, as a second process would see them


class _Unclosed:
    """A second handle on one memory store: closing it leaves the store open."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def close(self) -> None:
        pass


@pytest.fixture
def backdoor(store: Store, request: pytest.FixtureRequest) -> Backdoor:
    if isinstance(store, MemoryStore):
        return MemoryBackdoor(store)
    if isinstance(store, SQLiteStore):
        return SqliteBackdoor(store.path)
    return pg_backdoor(request)


def _state(row: EventRow) -> tuple[object, ...]:
    """Everything about a row except the read clock."""
    return (
        row.provider,
        row.event_id,
        row.state,
        row.attempt,
        row.body_sha256,
        row.received_at,
        row.updated_at,
        row.lease_until,
        row.outcome,
        row.response,
        row.latency_ms,
    )


async def _row(store: Store, provider: str, event_id: str) -> EventRow:
    row = await store.get(provider, event_id)
    assert row is not None, f"{provider}:{event_id} missing"
    return row


# == the contract ============================================================================


async def test_first_claim_wins_with_attempt_one_and_a_live_lease(store: Store) -> None:
    claim = await store.claim("stripe", "evt_1", BODY, LEASE, "proxy-a")

    assert claim.won is True
    row = claim.row
    assert (row.provider, row.event_id) == ("stripe", "evt_1")
    assert row.state is EventState.PROCESSING
    assert row.attempt == 1
    assert row.body_sha256 == BODY
    assert row.lease_live
    assert row.lease_until is not None
    assert row.lease_until == pytest.approx(row.received_at + LEASE, abs=0.01)
    assert row.received_at <= row.now < row.received_at + 5
    assert row.updated_at == row.received_at
    assert (row.outcome, row.response, row.latency_ms) == (None, None, None)
    assert abs(row.now - time.time()) < 60, "database clock as Unix epoch seconds"
    assert _state(await _row(store, "stripe", "evt_1")) == _state(row)


async def test_second_claim_returns_the_row_unchanged(store: Store) -> None:
    first = await store.claim("stripe", "evt_1", BODY, LEASE, "proxy-a")
    second = await store.claim("stripe", "evt_1", OTHER_BODY, 5.0, "proxy-b")

    assert second.won is False
    assert _state(second.row) == _state(first.row)
    assert second.row.body_sha256 == BODY, "the stored hash is the first delivery's"
    assert second.row.now >= first.row.now


async def test_the_provider_is_part_of_the_key(store: Store) -> None:
    a = await store.claim("stripe", "evt_1", BODY, LEASE, "p")
    b = await store.claim("github", "evt_1", BODY, LEASE, "p")
    assert a.won and b.won


async def test_fifty_concurrent_claims_of_one_key_have_exactly_one_winner(store: Store) -> None:
    claims: list[Claim] = await asyncio.gather(
        *(store.claim("stripe", "evt_race", BODY, LEASE, f"proxy-{i}") for i in range(50))
    )

    winners = [c for c in claims if c.won]
    assert len(winners) == 1
    assert all(c.row.attempt == 1 and c.row.state is EventState.PROCESSING for c in claims)
    assert {c.row.received_at for c in claims} == {winners[0].row.received_at}
    assert len(await store.list_events(provider="stripe")) == 1


async def test_take_over_refuses_a_live_lease(store: Store) -> None:
    first = await store.claim("stripe", "evt_1", BODY, LEASE, "proxy-a")

    assert await store.take_over("stripe", "evt_1", LEASE, "proxy-b") is None
    assert _state(await _row(store, "stripe", "evt_1")) == _state(first.row)


async def test_take_over_accepts_an_expired_lease(store: Store) -> None:
    await store.claim("stripe", "evt_1", BODY, 0, "crashed")
    assert not (await _row(store, "stripe", "evt_1")).lease_live

    assert await store.take_over("stripe", "evt_1", LEASE, "proxy-b") == 2
    row = await _row(store, "stripe", "evt_1")
    assert row.state is EventState.PROCESSING
    assert row.attempt == 2
    assert row.lease_live
    assert row.lease_until == pytest.approx(row.updated_at + LEASE, abs=0.01)
    assert row.body_sha256 == BODY


async def test_take_over_accepts_a_failed_row_and_clears_the_old_result(store: Store) -> None:
    await store.claim("stripe", "evt_1", BODY, LEASE, "proxy-a")
    assert await store.complete("stripe", "evt_1", 1, FAILED_503)

    assert await store.take_over("stripe", "evt_1", LEASE, "proxy-b") == 2
    row = await _row(store, "stripe", "evt_1")
    assert (row.state, row.attempt, row.lease_live) == (EventState.PROCESSING, 2, True)
    assert (row.outcome, row.response, row.latency_ms) == (None, None, None)


async def test_take_over_refuses_done_and_missing_rows(store: Store) -> None:
    await store.claim("stripe", "evt_1", BODY, 0, "proxy-a")
    assert await store.complete("stripe", "evt_1", 1, DONE_200)

    assert await store.take_over("stripe", "evt_1", LEASE, "proxy-b") is None
    assert await store.take_over("stripe", "nope", LEASE, "proxy-b") is None
    assert (await _row(store, "stripe", "evt_1")).state is EventState.DONE


@pytest.mark.parametrize("how", ["expired", "failed"])
async def test_twenty_concurrent_takeovers_increment_the_attempt_once(
    store: Store, how: str
) -> None:
    await store.claim("stripe", "evt_1", BODY, 0 if how == "expired" else LEASE, "crashed")
    if how == "failed":
        assert await store.complete("stripe", "evt_1", 1, FAILED_TIMEOUT)

    results = await asyncio.gather(
        *(store.take_over("stripe", "evt_1", LEASE, f"proxy-{i}") for i in range(20))
    )

    assert sorted(results, key=lambda r: r or 0) == [None] * 19 + [2]
    assert (await _row(store, "stripe", "evt_1")).attempt == 2


async def test_complete_records_done_with_the_response_and_clears_the_lease(
    store: Store,
) -> None:
    claim = await store.claim("stripe", "evt_1", BODY, LEASE, "proxy-a")

    assert await store.complete("stripe", "evt_1", 1, DONE_200) is True
    row = await _row(store, "stripe", "evt_1")
    assert row.state is EventState.DONE
    assert row.attempt == 1
    assert row.outcome is Outcome.RESPONSE
    assert row.response == DONE_200.response
    assert row.latency_ms == pytest.approx(12.5)
    assert row.lease_until is None and not row.lease_live
    assert row.updated_at >= claim.row.updated_at
    assert (row.received_at, row.body_sha256) == (claim.row.received_at, BODY)


async def test_complete_records_failed_without_a_response(store: Store) -> None:
    await store.claim("stripe", "evt_1", BODY, LEASE, "proxy-a")

    assert await store.complete("stripe", "evt_1", 1, FAILED_TIMEOUT) is True
    row = await _row(store, "stripe", "evt_1")
    assert (row.state, row.outcome, row.response) == (EventState.FAILED, Outcome.TIMEOUT, None)
    assert row.latency_ms == pytest.approx(10_000.0)
    assert row.lease_until is None


async def test_a_stale_attempt_cannot_overwrite_a_newer_one(store: Store) -> None:
    await store.claim("stripe", "evt_1", BODY, 0, "zombie")
    assert await store.take_over("stripe", "evt_1", LEASE, "proxy-b") == 2
    before = await _row(store, "stripe", "evt_1")

    assert await store.complete("stripe", "evt_1", 1, DONE_200) is False
    assert _state(await _row(store, "stripe", "evt_1")) == _state(before)

    assert await store.complete("stripe", "evt_1", 2, FAILED_503) is True
    done = await _row(store, "stripe", "evt_1")
    assert await store.complete("stripe", "evt_1", 2, DONE_200) is False, "already completed"
    assert await store.complete("stripe", "evt_1", 1, DONE_200) is False
    assert _state(await _row(store, "stripe", "evt_1")) == _state(done)
    assert done.response == FAILED_503.response


async def test_complete_of_a_missing_row_writes_nothing(store: Store) -> None:
    assert await store.complete("stripe", "nope", 1, DONE_200) is False
    assert await store.get("stripe", "nope") is None


async def test_complete_rejects_a_processing_result(store: Store) -> None:
    await store.claim("stripe", "evt_1", BODY, LEASE, "proxy-a")
    bogus = AttemptResult(EventState.PROCESSING, Outcome.RESPONSE, None, 1.0)
    with pytest.raises(ValueError):
        await store.complete("stripe", "evt_1", 1, bogus)
    assert (await _row(store, "stripe", "evt_1")).state is EventState.PROCESSING


async def test_get_of_a_missing_row_is_none(store: Store) -> None:
    assert await store.get("stripe", "nope") is None


async def test_values_round_trip_exactly(store: Store) -> None:
    event_id = "évt_😀_" + "x" * 200
    body = bytes(range(256)) * 4
    result = AttemptResult(
        state=EventState.DONE,
        outcome=Outcome.RESPONSE,
        response=RecordedResponse(
            status=201, headers=(("X-Ünicode", "välue ✓"), ("Empty", "")), body=body
        ),
        latency_ms=0.25,
    )
    sha = hashlib.sha256(body).digest()
    await store.claim("acme", event_id, sha, LEASE, "o")
    assert await store.complete("acme", event_id, 1, result)

    row = await _row(store, "acme", event_id)
    assert (row.event_id, row.body_sha256, row.response) == (event_id, sha, result.response)

    empty = AttemptResult(EventState.DONE, Outcome.RESPONSE, RecordedResponse(204, (), b""), 1)
    await store.claim("acme", "empty", sha, LEASE, "o")
    assert await store.complete("acme", "empty", 1, empty)
    assert (await _row(store, "acme", "empty")).response == RecordedResponse(204, (), b"")


async def test_list_events_filters_and_orders_newest_first(
    store: Store, backdoor: Backdoor
) -> None:
    for i, (provider, state) in enumerate(
        [
            ("stripe", EventState.DONE),
            ("stripe", EventState.FAILED),
            ("stripe", EventState.PROCESSING),
            ("github", EventState.DONE),
            ("github", EventState.PROCESSING),
        ]
    ):
        event_id = f"evt_{i}"
        await store.claim(provider, event_id, BODY, LEASE, "o")
        await backdoor.backdate(provider, event_id, 100 - i)  # evt_4 is the newest
        if state is EventState.DONE:
            assert await store.complete(provider, event_id, 1, DONE_200)
        elif state is EventState.FAILED:
            assert await store.complete(provider, event_id, 1, FAILED_503)

    def ids(rows: list[EventRow]) -> list[str]:
        return [r.event_id for r in rows]

    assert ids(await store.list_events()) == ["evt_4", "evt_3", "evt_2", "evt_1", "evt_0"]
    assert ids(await store.list_events(provider="stripe")) == ["evt_2", "evt_1", "evt_0"]
    assert ids(await store.list_events(state=EventState.DONE)) == ["evt_3", "evt_0"]
    assert ids(await store.list_events(provider="github", state=EventState.PROCESSING)) == ["evt_4"]
    assert ids(await store.list_events(limit=2)) == ["evt_4", "evt_3"]
    assert await store.list_events(provider="nobody") == []
    rows = await store.list_events(state=EventState.FAILED)
    assert len(rows) == 1 and rows[0].response == FAILED_503.response
    # evt_i was backdated by 100 - i seconds
    assert ids(await store.list_events(older_than_seconds=98.5)) == ["evt_1", "evt_0"]
    assert ids(await store.list_events(provider="github", older_than_seconds=96.5)) == ["evt_3"]


async def test_payload_is_kept_only_when_given_and_never_changed(store: Store) -> None:
    payload = StoredRequest(method="POST", path="/webhooks/stripe?x=1",
                            headers=(("Content-Type", "application/json"), ("X-A", "1")),
                            body=b'{"id": "evt_1"}\x00\xff')
    assert (await store.claim("stripe", "evt_1", BODY, LEASE, "o", payload)).won
    assert await store.get_payload("stripe", "evt_1") == payload
    other = StoredRequest(method="POST", path="/other", headers=(), body=b"other")
    assert not (await store.claim("stripe", "evt_1", BODY, LEASE, "o", other)).won
    assert await store.get_payload("stripe", "evt_1") == payload, "the first request is kept"
    await store.claim("stripe", "evt_2", BODY, LEASE, "o")
    assert await store.get_payload("stripe", "evt_2") is None
    assert await store.get_payload("stripe", "missing") is None


async def test_header_values_that_are_not_utf8_round_trip(store: Store) -> None:
    # aiohttp decodes header bytes that are not UTF-8 (e.g. Latin-1 "café") as lone
    # surrogates; PostgreSQL's jsonb refuses those in text, so they must survive some other way.
    odd = b'attachment; filename="caf\xe9"'.decode("utf-8", "surrogateescape")
    payload = StoredRequest(method="POST", path="/x", headers=(("X-Name", odd),), body=b"{}")
    assert (await store.claim("stripe", "evt_odd", BODY, LEASE, "o", payload)).won
    assert await store.get_payload("stripe", "evt_odd") == payload
    result = AttemptResult(EventState.DONE, Outcome.RESPONSE,
                           RecordedResponse(200, (("Content-Disposition", odd),), b"ok"), 1.0)
    assert await store.complete("stripe", "evt_odd", 1, result)
    row = await _row(store, "stripe", "evt_odd")
    assert row.response == result.response


async def test_stuck_counts_only_expired_processing_rows(store: Store) -> None:
    assert await store.stuck_counts() == {}
    await store.claim("stripe", "crashed-1", BODY, 0, "o")
    await store.claim("stripe", "crashed-2", BODY, 0, "o")
    await store.claim("github", "crashed", BODY, 0, "o")
    await store.claim("stripe", "live", BODY, LEASE, "o")
    await store.claim("stripe", "failed", BODY, 0, "o")
    assert await store.complete("stripe", "failed", 1, FAILED_503)
    assert await store.stuck_counts() == {"stripe": 2, "github": 1}


async def test_release_fails_a_stuck_row_so_the_next_delivery_takes_it_over(
    store: Store,
) -> None:
    await store.claim("stripe", "evt_1", BODY, 0, "crashed")  # processing, lease expired

    assert await store.release("stripe", "evt_1") is True
    row = await _row(store, "stripe", "evt_1")
    assert (row.state, row.attempt, row.lease_until) == (EventState.FAILED, 1, None)
    assert await store.complete("stripe", "evt_1", 1, DONE_200) is False, "released = fenced"
    assert await store.release("stripe", "evt_1") is True, "a failed row may be released again"

    assert await store.take_over("stripe", "evt_1", LEASE, "proxy-b") == 2
    assert await store.complete("stripe", "evt_1", 2, DONE_200) is True
    assert await store.release("stripe", "evt_1") is False, "a done row is not released"
    assert (await _row(store, "stripe", "evt_1")).state is EventState.DONE
    assert await store.release("stripe", "nope") is False
    assert await store.release("stripe", "nope", force=True) is False


async def test_release_leaves_a_live_lease_alone_unless_forced(store: Store) -> None:
    await store.claim("stripe", "evt_1", BODY, LEASE, "busy")

    assert await store.release("stripe", "evt_1") is False, "its attempt may still be running"
    row = await _row(store, "stripe", "evt_1")
    assert (row.state, row.attempt, row.lease_live) == (EventState.PROCESSING, 1, True)
    assert await store.take_over("stripe", "evt_1", LEASE, "proxy-b") is None

    assert await store.release("stripe", "evt_1", force=True) is True
    row = await _row(store, "stripe", "evt_1")
    assert (row.state, row.attempt, row.lease_until) == (EventState.FAILED, 1, None)
    assert await store.complete("stripe", "evt_1", 1, DONE_200) is False, "released = fenced"
    assert await store.take_over("stripe", "evt_1", LEASE, "proxy-b") == 2

    assert await store.complete("stripe", "evt_1", 2, DONE_200) is True
    assert await store.release("stripe", "evt_1", force=True) is False, "done is never released"
    assert (await _row(store, "stripe", "evt_1")).state is EventState.DONE


async def test_release_of_a_failed_row_needs_no_force(store: Store) -> None:
    await store.claim("stripe", "evt_1", BODY, LEASE, "o")
    assert await store.complete("stripe", "evt_1", 1, FAILED_503)
    assert await store.release("stripe", "evt_1") is True
    row = await _row(store, "stripe", "evt_1")
    assert (row.state, row.attempt, row.lease_until) == (EventState.FAILED, 1, None)


async def test_concurrent_plain_releases_never_release_a_renewed_live_attempt(
    store: Store,
) -> None:
    # The lease is checked in the statement that updates: a release racing a take-over of an
    # expired row either comes first (then the take-over finds a failed row and still wins
    # attempt 2) or after it (then it sees attempt 2's live lease and does nothing). Never is
    # attempt 2 released while live, whatever the interleaving.
    for round_ in range(5):
        event_id = f"evt_{round_}"
        await store.claim("stripe", event_id, BODY, 0, "crashed")
        releases = [store.release("stripe", event_id) for _ in range(3)]
        taken, *_ = await asyncio.gather(
            store.take_over("stripe", event_id, LEASE, "proxy-b"), *releases)
        assert taken == 2
        row = await _row(store, "stripe", event_id)
        assert (row.state, row.attempt, row.lease_live) == (EventState.PROCESSING, 2, True)


async def test_purge_deletes_expired_rows_oldest_first_in_batches(
    store: Store, backdoor: Backdoor
) -> None:
    await store.claim("stripe", "done", BODY, LEASE, "o")
    await store.claim("stripe", "failed", BODY, LEASE, "o")
    await store.claim("stripe", "expired", BODY, 0, "crashed")  # processing, lease expired
    await store.claim("stripe", "old-done-2", BODY, LEASE, "o")
    await store.claim("stripe", "live", BODY, LEASE, "busy")  # processing, lease live
    await store.claim("stripe", "fresh", BODY, LEASE, "o")
    await store.claim("github", "done", BODY, LEASE, "o")
    assert await store.complete("stripe", "done", 1, DONE_200)
    assert await store.complete("stripe", "failed", 1, FAILED_503)
    assert await store.complete("stripe", "old-done-2", 1, DONE_200)
    assert await store.complete("stripe", "fresh", 1, DONE_200)
    assert await store.complete("github", "done", 1, DONE_200)
    ages = {"done": 500, "failed": 400, "expired": 300, "old-done-2": 200, "live": 600}
    for event_id, age in ages.items():
        await backdoor.backdate("stripe", event_id, age)
    await backdoor.backdate("github", "done", 900)

    async def left() -> set[str]:
        return {r.event_id for r in await store.list_events(provider="stripe")}

    assert await store.purge("stripe", 3600, 10) == 0, "nothing is older than an hour"
    assert await store.purge("stripe", 100, 2) == 2
    assert await left() == {"expired", "old-done-2", "live", "fresh"}, "oldest first"
    assert await store.purge("stripe", 100, 2) == 2
    assert await store.purge("stripe", 100, 2) == 0
    assert await left() == {"live", "fresh"}
    assert await store.get("github", "done") is not None, "other providers are untouched"

    assert await store.release("stripe", "live") is False, "a live lease needs force"
    assert await store.release("stripe", "live", force=True) is True
    assert await store.purge("stripe", 100, 2) == 1, "a released row is no longer protected"
    assert await left() == {"fresh"}


async def test_ping_answers(store: Store) -> None:
    await store.ping()


async def test_a_closed_store_raises_store_error(store: Store) -> None:
    await store.close()
    with pytest.raises(StoreError):
        await store.get("stripe", "evt_1")
    with pytest.raises(StoreError):
        await store.ping()
    await store.close()  # idempotent


async def test_a_held_lock_makes_writes_fail_fast_with_store_error(
    store: Store, backdoor: Backdoor
) -> None:
    await store.claim("stripe", "evt_1", BODY, 0, "crashed")
    impatient = await backdoor.impatient_store()
    try:
        async with backdoor.hold_write_lock("stripe", "evt_1"):
            started = time.monotonic()
            with pytest.raises(StoreError):
                await impatient.take_over("stripe", "evt_1", LEASE, "proxy-b")
            assert time.monotonic() - started < 3.0
        assert await impatient.take_over("stripe", "evt_1", LEASE, "proxy-b") == 2
    finally:
        await impatient.close()


# == adapter-specific: reachability and faults ===============================================


@pytest.mark.postgres
async def test_postgres_unreachable_at_connect_raises_store_error_quickly() -> None:
    dsn = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"
    started = time.monotonic()
    with pytest.raises(StoreError):
        await PostgresStore.connect(dsn, connect_timeout=2.0)
    assert time.monotonic() - started < 5.0


async def test_sqlite_unopenable_file_raises_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError):
        await SQLiteStore.open(tmp_path / "no-such-dir" / "events.db")
    with pytest.raises(StoreError):
        await SQLiteStore.open(tmp_path)  # a directory


@pytest.mark.postgres
async def test_postgres_pool_survives_a_server_crash_and_restart(
    pg_throwaway_cluster: ThrowawayCluster,
) -> None:
    cluster = pg_throwaway_cluster
    await migrate_postgres(cluster.dsn)
    store = await PostgresStore.connect(
        cluster.dsn, min_size=3, max_size=3, acquire_timeout=2.0, connect_timeout=2.0
    )
    try:
        assert (await store.claim("stripe", "before", BODY, LEASE, "o")).won
        # Warm every pooled connection, so that all of them are broken by the crash.
        await asyncio.gather(*(store.get("stripe", "before") for _ in range(9)))

        await asyncio.to_thread(cluster.stop, "immediate")
        for _ in range(3):
            started = time.monotonic()
            with pytest.raises(StoreError):
                await store.claim("stripe", "during", BODY, LEASE, "o")
            assert time.monotonic() - started < 5.0

        await asyncio.to_thread(cluster.start)
        recovered = await _poll_until_answers(store, tries=50)
        assert recovered, "the pool did not serve again after PostgreSQL came back"

        before = await _row(store, "stripe", "before")
        assert before.state is EventState.PROCESSING, "a committed claim survives the crash"
        assert (await store.claim("stripe", "after", BODY, LEASE, "o")).won
        results = await asyncio.gather(*(store.get("stripe", "after") for _ in range(9)))
        assert all(r is not None for r in results), "every pooled connection works again"
    finally:
        await store.close()


@pytest.mark.postgres
async def test_postgres_exhausted_pool_raises_store_error_after_the_acquire_timeout(
    pg_store: PostgresStore, pg_dsn: str
) -> None:
    async with _one_connection_store(pg_store, pg_dsn, acquire_timeout=0.2,
                                     lock_timeout=3.0) as single:
        async with PgBackdoor(pg_dsn).hold_write_lock("stripe", "evt_1"):
            # The only pooled connection now waits on the row lock...
            blocked = await _release_blocked_on_the_only_connection(single)
            assert not blocked.done() and single._pool.get_idle_size() == 0
            started = time.monotonic()
            with pytest.raises(StoreError, match="no database connection"):
                await single.ping()
            assert time.monotonic() - started < 1.0
        assert await blocked is True, "the blocked statement completes once the lock is gone"
        await single.ping()


@pytest.mark.postgres
async def test_postgres_a_cancelled_call_gives_its_connection_back(
    pg_store: PostgresStore, pg_dsn: str
) -> None:
    async with _one_connection_store(pg_store, pg_dsn, acquire_timeout=1.0) as single:
        async with PgBackdoor(pg_dsn).hold_write_lock("stripe", "evt_1"):
            blocked = await _release_blocked_on_the_only_connection(single)
            assert not blocked.done()
            blocked.cancel()
            with pytest.raises(asyncio.CancelledError):
                await blocked
            await single.ping()  # the pool's only connection was dropped and is replaced
        assert await single.take_over("stripe", "evt_1", LEASE, "c") == 2


@asynccontextmanager
async def _one_connection_store(
    pg_store: PostgresStore, pg_dsn: str, **options: float
) -> AsyncIterator[PostgresStore]:
    """A store whose pool holds one connection, beside an expired claim of stripe:evt_1."""
    await pg_store.claim("stripe", "evt_1", BODY, 0, "crashed")
    single = await PostgresStore.connect(pg_dsn, min_size=1, max_size=1, **options)
    try:
        yield single
    finally:
        await single.close()


async def _release_blocked_on_the_only_connection(
    single: PostgresStore,
) -> asyncio.Task[bool]:
    """An operator's release of stripe:evt_1 (row locked by the caller) on a one-connection
    store, returned once it holds that connection: a bounded poll on the pool, not a sleep used
    as a barrier. (Not a take-over: that gives up on a locked row at once, RowLocked.)"""
    blocked = asyncio.create_task(single.release("stripe", "evt_1"))
    for _ in range(300):
        if not single._pool.get_idle_size() or blocked.done():
            break
        await asyncio.sleep(0.01)
    return blocked


async def _poll_until_answers(store: Store, *, tries: int) -> bool:
    """A bounded poll on a condition (the store answers), not a sleep used as a barrier."""
    for _ in range(tries):
        try:
            await store.ping()
            return True
        except StoreError:
            await asyncio.sleep(0.1)
    return False


@pytest.mark.postgres
async def test_postgres_unique_violation_on_claim_is_a_duplicate_not_an_error(
    pg_store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What ON CONFLICT may raise while the primary key is rebuilt concurrently (SQLSTATE 23505).
    first = await pg_store.claim("stripe", "evt_1", BODY, LEASE, "proxy-a")
    real_rows = pg_store._rows

    async def rows(name: str, params: Params) -> list[asyncpg.Record]:
        if name == "claim":
            try:
                raise asyncpg.UniqueViolationError("duplicate key value")
            except asyncpg.UniqueViolationError as exc:
                raise StoreError("claim: UniqueViolationError") from exc
        return await real_rows(name, params)

    monkeypatch.setattr(pg_store, "_rows", rows)
    second = await pg_store.claim("stripe", "evt_1", BODY, LEASE, "proxy-b")
    assert second.won is False
    assert _state(second.row) == _state(first.row)


async def test_sqlite_two_stores_on_one_file_have_exactly_one_winner(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    a, b = await asyncio.gather(SQLiteStore.open(path), SQLiteStore.open(path))
    try:
        claims = await asyncio.gather(
            *(
                (a if i % 2 else b).claim("stripe", "evt_race", BODY, LEASE, f"p{i}")
                for i in range(50)
            )
        )
        assert sum(c.won for c in claims) == 1
        await a.close()
        assert await b.take_over("stripe", "evt_race", LEASE, "b") is None
    finally:
        await a.close()
        await b.close()


_CLAIMER = textwrap.dedent(
    """
    import asyncio, sys
    from sidecar.store.sqlite import SQLiteStore

    async def main(path, name):
        store = await SQLiteStore.open(path)
        won = 0
        try:
            for i in range(40):
                claim = await store.claim("stripe", f"evt_{i}", b"h", 30.0, name)
                won += claim.won
        finally:
            await store.close()
        print(won)

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


async def test_sqlite_two_processes_sharing_the_file_claim_each_key_once(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")

    async def run(name: str) -> int:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _CLAIMER,
            path,
            name,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
        assert proc.returncode == 0, err.decode()
        return int(out)

    won = await asyncio.gather(run("proc-a"), run("proc-b"))
    assert sum(won) == 40, won
    store = await SQLiteStore.open(path)
    try:
        rows = await store.list_events(provider="stripe", limit=1000)
        assert len(rows) == 40 and all(r.attempt == 1 for r in rows)
    finally:
        await store.close()


async def test_sqlite_calls_queued_behind_a_held_lock_fail_within_the_deadline(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "events.db")
    store = await SQLiteStore.open(path, busy_timeout=0.3)
    try:
        async with SqliteBackdoor(path).hold_write_lock("stripe", "evt_1"):
            started = time.monotonic()
            results = await asyncio.gather(
                *(store.claim("stripe", f"evt_{i}", BODY, LEASE, "o") for i in range(5)),
                return_exceptions=True)
            elapsed = time.monotonic() - started
        assert all(isinstance(r, StoreError) for r in results), results
        # One worker thread: without a deadline the five would fail one busy timeout apart.
        assert elapsed < 5 * 0.3
        assert (await store.claim("stripe", "evt_after", BODY, LEASE, "o")).won
    finally:
        await store.close()


async def test_a_nonce_is_bound_to_the_first_body_seen_with_it(
    store: Store, backdoor: Backdoor
) -> None:
    first, other = hashlib.sha256(b"first").digest(), hashlib.sha256(b"other").digest()
    assert (await store.bind_nonce("mailgun", "tok_1", first)).digest == first
    assert (await store.bind_nonce("mailgun", "tok_1", other)).digest == first  # a replay
    assert (await store.bind_nonce("mailgun", "tok_1", first)).digest == first  # a redelivery
    assert (await store.bind_nonce("other", "tok_1", other)).digest == other  # per provider
    # Concurrent first sightings with different bodies: exactly one body wins, for everyone.
    bodies = [hashlib.sha256(f"b{i}".encode()).digest() for i in range(20)]
    bound = [b.digest for b in await asyncio.gather(
        *(store.bind_nonce("mailgun", "tok_2", b) for b in bodies))]
    assert len(set(bound)) == 1 and bound[0] in bodies
    assert await store.purge_nonces("mailgun", 3600, 10) == 0  # all fresh
    assert await store.purge_nonces("mailgun", 0, 1) == 1  # one per batch, oldest first
    assert await store.purge_nonces("mailgun", 0, 10) == 1
    assert (await store.bind_nonce("mailgun", "tok_1", other)).digest == other  # purged: anew


async def test_a_binding_is_answered_with_when_it_was_first_bound(
    store: Store, backdoor: Backdoor
) -> None:
    """``bind_nonce`` answers when the binding was made and the database clock, so a caller
    can tell how long retention keeps it (the answer cache dates what it remembers by this): a
    later bind, a redelivery or a replay, never moves the time, and the age is the one
    ``purge_nonces`` goes by."""
    provider = "mailgun_dated"
    first, other = hashlib.sha256(b"first").digest(), hashlib.sha256(b"other").digest()
    made = await store.bind_nonce(provider, "tok", first)
    assert made.digest == first and 0.0 <= made.now - made.received_at < 5.0
    await backdoor.backdate_nonces(provider, 600)
    for body in (first, other):  # a redelivery, then a replay
        again = await store.bind_nonce(provider, "tok", body)
        assert again.digest == first
        assert again.received_at == pytest.approx(made.received_at - 600, abs=0.01)
        assert 600.0 <= again.now - again.received_at < 605.0
    age = again.now - again.received_at
    assert await store.purge_nonces(provider, age + 60, 10) == 0  # younger than that: kept
    assert await store.purge_nonces(provider, age - 60, 10) == 1
    # Concurrent first sightings (sent together as one batch where the store does that): one
    # binding, one time, for everyone.
    bodies = [hashlib.sha256(f"b{i}".encode()).digest() for i in range(20)]
    bound = await asyncio.gather(*(store.bind_nonce(provider, "tok_2", b) for b in bodies))
    assert len({(b.digest, b.received_at) for b in bound}) == 1
    assert all(b.now >= b.received_at for b in bound)


# == the memory store's own clock =============================================================


class HandClock:
    """A clock that moves only when told to."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def test_memory_store_keeps_time_by_the_injected_clock() -> None:
    clock = HandClock(1_000.0)
    store = MemoryStore(clock=clock)
    claim = await store.claim("stripe", "evt_1", BODY, 30.0, "proxy-a")
    assert (claim.row.received_at, claim.row.lease_until, claim.row.now) == (1_000.0, 1_030.0,
                                                                             1_000.0)

    clock.now = 1_029.5
    assert await store.take_over("stripe", "evt_1", LEASE, "proxy-b") is None
    assert await store.stuck_counts() == {}
    assert (await _row(store, "stripe", "evt_1")).now == 1_029.5

    clock.now = 1_030.0  # a lease ending exactly now has expired
    assert not (await _row(store, "stripe", "evt_1")).lease_live
    assert await store.stuck_counts() == {"stripe": 1}
    assert await store.take_over("stripe", "evt_1", 10.0, "proxy-b") == 2
    row = await _row(store, "stripe", "evt_1")
    assert (row.updated_at, row.lease_until, row.received_at) == (1_030.0, 1_040.0, 1_000.0)

    assert await store.complete("stripe", "evt_1", 2, DONE_200)
    assert await store.list_events(older_than_seconds=30.0) == [], "not strictly older"
    assert await store.purge("stripe", 30.0, 10) == 0
    clock.now = 1_030.001
    assert [r.event_id for r in await store.list_events(older_than_seconds=30.0)] == ["evt_1"]
    assert await store.purge("stripe", 30.0, 10) == 1

    assert (await store.bind_nonce("mailgun", "tok", BODY)).digest == BODY
    assert await store.purge_nonces("mailgun", 0.0, 10) == 0, "bound this very instant"
    clock.now += 1.0
    assert await store.purge_nonces("mailgun", 0.0, 10) == 1


def test_memory_store_docstring_example_runs() -> None:
    results = doctest.testmod(memory_module)
    assert results.attempted > 0 and results.failed == 0, results


async def test_memory_store_calls_interleave_like_round_trips() -> None:
    store = MemoryStore()
    order: list[str] = []

    async def deliver(name: str) -> bool:
        order.append(f"{name} claims")
        claim = await store.claim("stripe", "evt_1", BODY, LEASE, name)
        order.append(f"{name} has its answer")
        return claim.won

    assert await asyncio.gather(deliver("a"), deliver("b")) == [True, False]
    assert order == ["a claims", "b claims", "a has its answer", "b has its answer"]
