"""What the pipeline and the forwarder make of store faults, in memory: a takeover of a row
another session holds is in flight (409), and a result write that fails is tried again until it
is recorded, recognised when a failed try had landed after all, and given up when the store is
closed. The real MemoryStore underneath, with faults scripted on top; the same faults against
PostgreSQL are in ``tests/integration/test_store_faults.py``."""

from __future__ import annotations

from typing import Any

import structlog

from sidecar.core.answers import Result
from sidecar.core.errors import RowLocked, StoreClosed, StoreError
from sidecar.core.events import AttemptResult, EventState, RecordedResponse
from sidecar.runtime.testing import MemoryStore
from tests.unit.test_pipeline import World


class LockedRows(MemoryStore):
    """Every take-over meets the row held by another database session."""

    async def take_over(self, *args: Any) -> int | None:
        raise RowLocked("take_over: the event row is locked by another session")


async def test_a_takeover_of_a_row_another_session_holds_is_answered_as_in_flight() -> None:
    world = World(store=LockedRows())
    await world.store.claim("stripe", "evt_1", b"x", 0, "crashed")  # its lease has expired
    answer = await world.stripe("evt_1")
    assert (answer.status, answer.result, answer.reason) == (409, Result.IN_FLIGHT, "row_locked")
    assert world.header(answer, "Retry-After") == "1"
    assert world.upstream.requests == [], "never forwarded while another session holds it"


class FailingWrites(MemoryStore):
    """The first ``failures`` result writes fail; with ``landed``, each failing one has written
    the row before its answer was lost (a commit whose reply went with the connection)."""

    def __init__(self, failures: int, *, landed: bool = False,
                 error: type[StoreError] = StoreError) -> None:
        super().__init__()
        self.failures = failures
        self.landed = landed
        self.error = error
        self.tries = 0

    async def complete(self, provider: str, event_id: str, attempt: int,
                       result: AttemptResult) -> bool:
        self.tries += 1
        if self.tries > self.failures:
            return await super().complete(provider, event_id, attempt, result)
        if self.landed:
            await super().complete(provider, event_id, attempt, result)
        raise self.error(f"complete: {self.error.__name__}")


async def test_a_failed_result_write_is_tried_again_until_it_is_recorded() -> None:
    world = World(store=FailingWrites(2))
    with structlog.testing.capture_logs() as logs:
        answer = await world.stripe("evt_1")
    assert answer.status == 200 and "record_error" not in answer.log
    assert world.store.tries == 3
    assert (await world.store.get("stripe", "evt_1")).state is EventState.DONE
    assert [e["event"] for e in logs if e["event"].startswith("record_")] == [
        "record_retrying", "record_recovered"]


async def test_a_write_that_landed_before_its_answer_was_lost_counts_as_recorded() -> None:
    world = World(store=FailingWrites(1, landed=True))
    answer = await world.stripe("evt_1")
    assert answer.status == 200 and "superseded" not in answer.log
    assert world.metrics.superseded.labels("stripe")._value.get() == 0
    assert (await world.store.get("stripe", "evt_1")).state is EventState.DONE


async def test_a_closed_store_ends_the_retries_at_once() -> None:
    world = World(store=FailingWrites(99, error=StoreClosed))
    with structlog.testing.capture_logs() as logs:
        answer = await world.stripe("evt_1")
    assert "StoreClosed" in str(answer.log["record_error"]) and world.store.tries == 1
    assert [e["event"] for e in logs if e["event"].startswith("record_")] == ["record_failed"]


async def test_an_app_2xx_that_could_not_be_recorded_is_not_relayed() -> None:
    # Relayed, the 2xx would end the provider's retries and leave the row `processing` for good.
    world = World(store=FailingWrites(99, error=StoreClosed))
    answer = await world.stripe("evt_1")
    assert (answer.status, answer.result, answer.reason) == (503, Result.STORE_ERROR,
                                                             "record_failed")
    assert world.header(answer, "Retry-After") == "5"
    assert len(world.upstream.requests) == 1
    row = await world.store.get("stripe", "evt_1")
    assert row.state is EventState.PROCESSING, "taken over after its lease, attempt 2"


async def test_an_app_failure_that_could_not_be_recorded_is_relayed() -> None:
    # Not final: the provider retries it anyway, and the app's own answer says more.
    world = World(store=FailingWrites(99, error=StoreClosed))
    world.upstream.reply = lambda _: RecordedResponse(500, (), b"app down")
    answer = await world.stripe("evt_1")
    assert (answer.status, answer.body) == (500, b"app down")
