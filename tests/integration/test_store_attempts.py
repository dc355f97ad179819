"""The attempts timeline (``Store.attempts``), one contract for every ``Store``: real SQLite,
real PostgreSQL and the in-memory store (``[sqlite]``, ``[postgres]``, ``[memory]``), as in
``test_store_contract`` and ``test_store_queue_contract``.

Every result write that lands records one attempt, with what the write cleared (the lease
owner) and what it wrote (outcome, status, latency, the row's new state); a write that is
superseded records nothing; retention deletes an event's attempts with it. The coalesced batch
and the repeats after a lost answer are checked where those paths are (``test_coalesced_writes``,
``test_store_faults``, ``test_store_queue_contract``).
"""

from __future__ import annotations

import pytest

from sidecar.core.events import (
    Attempt,
    AttemptResult,
    EventState,
    Outcome,
    RecordedResponse,
    Settlement,
)
from sidecar.core.ports import Store
from sidecar.store.memory import MemoryStore
from sidecar.store.sqlite import SQLiteStore
from tests.backdoor import Backdoor, SqliteBackdoor, pg_backdoor
from tests.integration.test_store_contract import BODY, LEASE, MemoryBackdoor
from tests.integration.test_store_queue_contract import REQUEST

OK_200 = AttemptResult(EventState.DONE, Outcome.RESPONSE,
                       RecordedResponse(200, (("Content-Type", "text/plain"),), b"ok"), 12.5)
FAILED_500 = AttemptResult(EventState.FAILED, Outcome.RESPONSE,
                           RecordedResponse(500, (), b"boom"), 250.0)
TIMED_OUT = AttemptResult(EventState.FAILED, Outcome.TIMEOUT, None, 10_000.0)
REFUSED = AttemptResult(EventState.FAILED, Outcome.CONNECT_ERROR, None, 0.75)


@pytest.fixture
def store(every_store: Store) -> Store:
    return every_store


@pytest.fixture
def backdoor(store: Store, request: pytest.FixtureRequest) -> Backdoor:
    if isinstance(store, MemoryStore):
        return MemoryBackdoor(store)
    if isinstance(store, SQLiteStore):
        return SqliteBackdoor(store.path)
    return pg_backdoor(request)


def _brief(attempts: list[Attempt]) -> list[tuple[object, ...]]:
    """What each attempt says, times left out."""
    return [(a.attempt, a.owner, a.outcome, a.status, a.latency_ms, a.state, a.error)
            for a in attempts]


# == forward mode ===========================================================================


async def test_an_event_without_a_result_has_no_attempts(store: Store) -> None:
    assert await store.attempts("stripe", "evt_none") == []
    await store.claim("stripe", "evt_1", BODY, LEASE, "proxy-a")
    assert await store.attempts("stripe", "evt_1") == [], "in flight: nothing recorded yet"


async def test_a_result_write_records_attempt_one_with_its_owner_status_and_latency(
    store: Store,
) -> None:
    claim = await store.claim("stripe", "evt_1", BODY, LEASE, "proxy-a")
    assert await store.complete("stripe", "evt_1", 1, OK_200)
    row = await store.get("stripe", "evt_1")
    assert row is not None
    (attempt,) = await store.attempts("stripe", "evt_1")
    assert _brief([attempt]) == [(1, "proxy-a", Outcome.RESPONSE, 200, 12.5, EventState.DONE,
                                  None)]
    # Times on the database clock: finished when the row was written, started a latency
    # before, after the claim.
    assert attempt.finished_at == pytest.approx(row.updated_at, abs=0.01)
    assert attempt.finished_at - attempt.started_at == pytest.approx(0.0125, abs=1e-5)
    assert attempt.started_at >= claim.row.received_at - 0.0125


async def test_a_take_over_after_a_failure_records_attempt_two_beside_attempt_one(
    store: Store,
) -> None:
    await store.claim("stripe", "evt_1", BODY, LEASE, "proxy-a")
    assert await store.complete("stripe", "evt_1", 1, FAILED_500)
    assert await store.take_over("stripe", "evt_1", LEASE, "proxy-b") == 2
    assert await store.complete("stripe", "evt_1", 2, OK_200)
    attempts = await store.attempts("stripe", "evt_1")
    assert _brief(attempts) == [
        (1, "proxy-a", Outcome.RESPONSE, 500, 250.0, EventState.FAILED, None),
        (2, "proxy-b", Outcome.RESPONSE, 200, 12.5, EventState.DONE, None),
    ]
    assert attempts[0].finished_at <= attempts[1].finished_at


async def test_an_attempt_without_an_answer_is_recorded_without_a_status(store: Store) -> None:
    await store.claim("stripe", "evt_1", BODY, LEASE, "proxy-a")
    assert await store.complete("stripe", "evt_1", 1, TIMED_OUT)
    assert _brief(await store.attempts("stripe", "evt_1")) == [
        (1, "proxy-a", Outcome.TIMEOUT, None, 10_000.0, EventState.FAILED, None)]


async def test_a_superseded_result_write_records_nothing(store: Store) -> None:
    await store.claim("stripe", "evt_1", BODY, 0, "proxy-a")  # the lease expires at once
    assert await store.take_over("stripe", "evt_1", LEASE, "proxy-b") == 2
    assert not await store.complete("stripe", "evt_1", 1, OK_200), "attempt 1 is stale"
    assert await store.attempts("stripe", "evt_1") == []
    assert await store.complete("stripe", "evt_1", 2, FAILED_500)
    assert not await store.complete("stripe", "evt_1", 2, OK_200), "recorded already"
    assert _brief(await store.attempts("stripe", "evt_1")) == [
        (2, "proxy-b", Outcome.RESPONSE, 500, 250.0, EventState.FAILED, None)]


async def test_attempts_are_per_event(store: Store) -> None:
    for provider, event_id in (("stripe", "evt_1"), ("stripe", "evt_2"), ("github", "evt_1")):
        await store.claim(provider, event_id, BODY, LEASE, f"{provider}-{event_id}")
        assert await store.complete(provider, event_id, 1, OK_200)
    assert [a.owner for a in await store.attempts("github", "evt_1")] == ["github-evt_1"]
    assert [a.owner for a in await store.attempts("stripe", "evt_2")] == ["stripe-evt_2"]


# == queue mode =============================================================================


async def _take_one(store: Store, event_id: str, owner: str) -> tuple[int, int]:
    (work,) = await store.take_queued("stripe", 10, LEASE, owner)
    assert work.event_id == event_id
    return work.attempt, work.tries


async def test_queued_tries_are_recorded_with_their_state_and_error(store: Store) -> None:
    assert (await store.enqueue("stripe", "evt_1", BODY, REQUEST)).accepted
    # A try the app answered 500: retried.
    attempt, tries = await _take_one(store, "evt_1", "worker-a")
    assert attempt == 1
    assert await store.settle_queued("stripe", "evt_1", tries, Settlement(
        EventState.QUEUED, FAILED_500, retry_in=0.0, error="HTTP 500"))
    # A try that could not connect: attempt 2 is given back, so the next try is attempt 2 too.
    attempt, tries = await _take_one(store, "evt_1", "worker-b")
    assert attempt == 2
    assert await store.settle_queued("stripe", "evt_1", tries, Settlement(
        EventState.QUEUED, REFUSED, retry_in=0.0, reached=False, error="connection refused"))
    # Attempt 2 again, the budget spent: dead. Re-driven, attempt 3 is done.
    attempt, tries = await _take_one(store, "evt_1", "worker-a")
    assert attempt == 2
    assert await store.settle_queued("stripe", "evt_1", tries, Settlement(
        EventState.DEAD, TIMED_OUT, error="max_attempts"))
    assert await store.requeue_dead("stripe", "evt_1") == ["evt_1"]
    attempt, tries = await _take_one(store, "evt_1", "worker-b")
    assert attempt == 3
    assert await store.settle_queued("stripe", "evt_1", tries, Settlement(EventState.DONE,
                                                                          OK_200))
    assert _brief(await store.attempts("stripe", "evt_1")) == [
        (1, "worker-a", Outcome.RESPONSE, 500, 250.0, EventState.QUEUED, "HTTP 500"),
        (2, "worker-b", Outcome.CONNECT_ERROR, None, 0.75, EventState.QUEUED,
         "connection refused"),
        (2, "worker-a", Outcome.TIMEOUT, None, 10_000.0, EventState.DEAD, "max_attempts"),
        (3, "worker-b", Outcome.RESPONSE, 200, 12.5, EventState.DONE, None),
    ]


async def test_a_superseded_settle_records_nothing(store: Store) -> None:
    assert (await store.enqueue("stripe", "evt_1", BODY, REQUEST)).accepted
    (first,) = await store.take_queued("stripe", 10, 0, "worker-a")  # its lease ends at once
    (second,) = await store.take_queued("stripe", 10, LEASE, "worker-b")
    assert second.tries == first.tries + 1
    assert not await store.settle_queued("stripe", "evt_1", first.tries,
                                         Settlement(EventState.DONE, OK_200))
    assert await store.attempts("stripe", "evt_1") == []
    assert await store.settle_queued("stripe", "evt_1", second.tries,
                                     Settlement(EventState.DONE, OK_200))
    assert [(a.attempt, a.owner) for a in await store.attempts("stripe", "evt_1")] == [
        (2, "worker-b")]


# == retention ==============================================================================


async def test_purge_deletes_an_events_attempts_with_it(store: Store, backdoor: Backdoor) -> None:
    for event_id in ("evt_old", "evt_new"):
        await store.claim("stripe", event_id, BODY, LEASE, "proxy-a")
        assert await store.complete("stripe", event_id, 1, FAILED_500)
        assert await store.take_over("stripe", event_id, LEASE, "proxy-b") == 2
        assert await store.complete("stripe", event_id, 2, OK_200)
    await backdoor.backdate("stripe", "evt_old", 3600)
    assert await store.purge("stripe", 60, 100) == 1
    assert await store.attempts("stripe", "evt_old") == []
    assert [a.attempt for a in await store.attempts("stripe", "evt_new")] == [1, 2]
    # The same id delivered again after retention starts a timeline of its own.
    assert (await store.claim("stripe", "evt_old", BODY, LEASE, "proxy-c")).won
    assert await store.complete("stripe", "evt_old", 1, OK_200)
    assert [(a.attempt, a.owner) for a in await store.attempts("stripe", "evt_old")] == [
        (1, "proxy-c")]
