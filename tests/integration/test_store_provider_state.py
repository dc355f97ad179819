"""The provider-state contract (``core.ports.ProviderStateStore``) on every store: SQLite,
PostgreSQL (plain and partitioned) and memory. Each transition is one guarded statement, so
concurrent callers (real concurrency: a pool of connections) see exactly one winner."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from sidecar.core.breaker import BreakerPolicy, BreakerState, ProbeEnd, ProviderState
from sidecar.core.ports import Store

POLICY = BreakerPolicy(failures=3, window=60.0, cooldown=30.0)
NO_COOLDOWN = BreakerPolicy(failures=2, window=60.0, cooldown=0.0)


@pytest.fixture
def store(every_store: Store) -> Store:
    return every_store


@pytest.fixture
def p() -> str:
    """A provider of this test alone (a PostgreSQL database serves the whole module)."""
    return f"p-{uuid.uuid4().hex[:10]}"


async def state_of(store: Store, provider: str) -> ProviderState:
    [state] = [s for s in await store.provider_states() if s.provider == provider]
    return state


async def test_a_provider_without_a_row_has_none(store: Store, p: str) -> None:
    assert p not in {s.provider for s in await store.provider_states()}


async def test_pause_resume_are_guarded_and_read_back(store: Store, p: str) -> None:
    paused = await store.pause_provider(p, "ops@host", "incident 12")
    assert paused is not None and paused.paused is not None
    assert (paused.paused.by, paused.paused.reason) == ("ops@host", "incident 12")
    assert abs(paused.paused.at - paused.now) < 5
    assert await store.pause_provider(p, "other", "again") is None  # the first stands
    read = await state_of(store, p)
    assert read.paused == paused.paused
    resumed = await store.resume_provider(p)
    assert resumed is not None and resumed.paused is None
    assert await store.resume_provider(p) is None
    assert await store.resume_provider(p + "-never") is None
    read = await state_of(store, p)
    assert read.paused is None and read.breaker is BreakerState.CLOSED


async def test_concurrent_pauses_have_one_winner(store: Store, p: str) -> None:
    results = await asyncio.gather(*(store.pause_provider(p, f"op{i}", "x")
                                     for i in range(8)))
    assert sum(r is not None for r in results) == 1


async def test_failures_open_the_breaker_once_at_the_threshold(store: Store, p: str) -> None:
    first = await store.breaker_failure(p, POLICY, "HTTP 500")
    assert first is not None and (first.failures, first.breaker) == (1, BreakerState.CLOSED)
    second = await store.breaker_failure(p, POLICY, "timeout")
    assert second is not None and (second.failures, second.breaker) == (2, BreakerState.CLOSED)
    assert second.failures_since == first.failures_since
    third = await store.breaker_failure(p, POLICY, "HTTP 502")
    assert third is not None and third.breaker is BreakerState.OPEN
    assert (third.failures, third.last_failure) == (3, "HTTP 502")
    assert third.opened_at is not None and third.open_until is not None
    assert third.open_until - third.opened_at == pytest.approx(POLICY.cooldown, abs=0.01)
    # open: not counted any more; not due for a probe during the cooldown
    assert await store.breaker_failure(p, POLICY, "HTTP 500") is None
    assert await store.take_probe(p, "a", 10.0) is None
    read = await state_of(store, p)
    assert read.breaker is BreakerState.OPEN and read.failures == 3


async def test_a_window_that_ran_out_starts_again(store: Store, p: str) -> None:
    short = BreakerPolicy(failures=2, window=0.000001, cooldown=30.0)
    await store.breaker_failure(p, short, "HTTP 500")
    await asyncio.sleep(0.01)  # past a 1 µs window, on the store's clock too
    again = await store.breaker_failure(p, short, "HTTP 500")
    assert again is not None and (again.failures, again.breaker) == (1, BreakerState.CLOSED)


async def test_concurrent_failures_open_it_exactly_once(store: Store, p: str) -> None:
    policy = BreakerPolicy(failures=5, window=60.0, cooldown=30.0)
    results = await asyncio.gather(*(store.breaker_failure(p, policy, f"#{i}")
                                     for i in range(12)))
    counted = [r for r in results if r is not None]
    assert sum(r.breaker is BreakerState.OPEN for r in counted) == 1
    assert len(counted) == 5  # after the opening one, nothing is counted


async def test_one_probe_after_the_cooldown_and_its_ends(store: Store, p: str) -> None:
    for _ in range(2):
        await store.breaker_failure(p, NO_COOLDOWN, "HTTP 500")
    takes = await asyncio.gather(*(store.take_probe(p, f"owner{i}", 10.0) for i in range(6)))
    [taken] = [t for t in takes if t is not None]
    assert taken.breaker is BreakerState.HALF_OPEN and taken.probe_owner is not None
    owner = taken.probe_owner
    assert await store.take_probe(p, "late", 10.0) is None  # its lease is live
    assert await store.end_probe(p, "not-the-owner", ProbeEnd.SUCCEEDED, 0.0, "") is None
    # failed: open again for another cooldown, why updated
    failed = await store.end_probe(p, owner, ProbeEnd.FAILED, 30.0, "HTTP 503")
    assert failed is not None and failed.breaker is BreakerState.OPEN
    assert failed.last_failure == "HTTP 503" and failed.probe_owner is None
    assert failed.open_until is not None and failed.open_until > failed.now + 29
    assert await store.take_probe(p, owner, 10.0) is None


async def test_a_probe_that_succeeds_closes_an_unused_one_goes_back(store: Store,
                                                                   p: str) -> None:
    for _ in range(2):
        await store.breaker_failure(p, NO_COOLDOWN, "HTTP 500")
    assert await store.take_probe(p, "a", 10.0) is not None
    unused = await store.end_probe(p, "a", ProbeEnd.UNUSED, 0.0, "")
    assert unused is not None and unused.breaker is BreakerState.OPEN
    assert await store.take_probe(p, "b", 10.0) is not None  # due again at once
    closed = await store.end_probe(p, "b", ProbeEnd.SUCCEEDED, 0.0, "")
    assert closed is not None
    assert (closed.breaker, closed.failures, closed.open_until) == (BreakerState.CLOSED, 0, None)
    counted = await store.breaker_failure(p, NO_COOLDOWN, "HTTP 500")
    assert counted is not None and counted.failures == 1  # counting starts afresh


async def test_a_lost_probe_is_taken_again_after_its_lease(store: Store, p: str) -> None:
    for _ in range(2):
        await store.breaker_failure(p, NO_COOLDOWN, "HTTP 500")
    assert await store.take_probe(p, "crashed", 0.0) is not None  # its lease ends at once
    again = await store.take_probe(p, "b", 10.0)
    assert again is not None and again.probe_owner == "b"
    assert await store.end_probe(p, "crashed", ProbeEnd.SUCCEEDED, 0.0, "") is None


async def test_no_probe_while_paused(store: Store, p: str) -> None:
    for _ in range(2):
        await store.breaker_failure(p, NO_COOLDOWN, "HTTP 500")
    await store.pause_provider(p, "ops", "")
    assert await store.take_probe(p, "a", 10.0) is None
    await store.resume_provider(p)
    assert await store.take_probe(p, "a", 10.0) is not None
