"""The delivery limits' store verbs (``core.ports.LimitStore``) under one contract, on real
SQLite, real PostgreSQL (plain and partitioned) and the memory store: the ``every_store``
fixture runs each test on all of them. Concurrency is real (``asyncio.gather`` over the
PostgreSQL pool's connections); an ended lease is made with ``lease_seconds=0``; the refill is
measured on the database's clock, bounded in time."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from sidecar.core.limits import RateLimit, next_token_in
from sidecar.core.ports import Store

SLOW = RateLimit(per_second=0.001, burst=5)  # refills nothing within a test


@pytest.fixture
def store(every_store: Store) -> Store:
    return every_store


@pytest.fixture
def provider() -> str:
    """A provider of its own: the session databases are shared by the module's tests."""
    return f"p{uuid.uuid4().hex[:12]}"


async def test_a_new_bucket_starts_full_and_grants_whole_tokens_up_to_what_is_there(
        store: Store, provider: str) -> None:
    first = await store.take_tokens(provider, 3, SLOW)
    assert first.granted == 3 and first.left == pytest.approx(2, abs=0.01)
    second = await store.take_tokens(provider, 5, SLOW)
    assert second.granted == 2 and second.left < 1
    third = await store.take_tokens(provider, 1, SLOW)
    assert third.granted == 0 and 0 <= third.left < 1


async def test_concurrent_takes_never_get_more_than_the_bucket_held(
        store: Store, provider: str) -> None:
    limit = RateLimit(per_second=0.001, burst=7)
    takes = await asyncio.gather(*(store.take_tokens(provider, 1, limit) for _ in range(20)))
    assert sum(t.granted for t in takes) == 7


async def test_the_bucket_refills_from_the_clock_at_the_rate(store: Store,
                                                             provider: str) -> None:
    limit = RateLimit(per_second=20.0, burst=1)
    assert (await store.take_tokens(provider, 1, limit)).granted == 1
    started = time.monotonic()
    empty = await store.take_tokens(provider, 1, limit)
    assert empty.granted == 0
    assert 0 < next_token_in(empty.left, limit) <= 0.05 + 1e-9
    deadline = started + 5.0
    while (await store.take_tokens(provider, 1, limit)).granted == 0:
        assert time.monotonic() < deadline, "no token within 5 s at 20/s"
        await asyncio.sleep(0.005)  # polling the database clock, not synchronising
    # At most one token came in the time a token takes (50 ms), less the first read's lag.
    assert time.monotonic() - started >= 0.03


async def test_tokens_put_back_are_taken_again_never_above_the_burst(
        store: Store, provider: str) -> None:
    await store.return_tokens(provider, 3, SLOW)  # no bucket yet: nothing to put back
    assert (await store.take_tokens(provider, 5, SLOW)).granted == 5
    await store.return_tokens(provider, 2, SLOW)
    assert (await store.take_tokens(provider, 5, SLOW)).granted == 2
    await store.return_tokens(provider, 50, SLOW)
    assert (await store.take_tokens(provider, 50, SLOW)).granted == 5


async def test_permits_up_to_the_concurrency_and_released_for_the_next_taker(
        store: Store, provider: str) -> None:
    held = await store.take_permits(provider, 2, 3, 30.0, "proxy-a")
    more = await store.take_permits(provider, 5, 3, 30.0, "proxy-b")
    assert sorted(p.slot for p in held + more) == [1, 2, 3]
    assert await store.take_permits(provider, 1, 3, 30.0, "proxy-c") == []
    assert await store.release_permits(held[:1]) == 1
    again = await store.take_permits(provider, 3, 3, 30.0, "proxy-c")
    assert [p.slot for p in again] == [held[0].slot]
    # Another provider's slots are its own.
    assert len(await store.take_permits(provider + "x", 3, 3, 30.0, "proxy-a")) == 3


async def test_concurrent_takers_never_hold_more_permits_than_the_concurrency(
        store: Store, provider: str) -> None:
    takes = await asyncio.gather(*(store.take_permits(provider, 2, 5, 30.0, f"proxy-{n}")
                                   for n in range(12)))
    slots = [p.slot for take in takes for p in take]
    assert len(slots) == len(set(slots)) and 1 <= len(slots) <= 5
    # Losers of a race got fewer: asking again fills the free slots, and never one more.
    while len(slots) < 5:
        got = await store.take_permits(provider, 5, 5, 30.0, "proxy-late")
        assert got, "free slots not granted to a lone taker"
        slots += [p.slot for p in got]
    assert sorted(slots) == [1, 2, 3, 4, 5]
    assert await store.take_permits(provider, 1, 5, 30.0, "proxy-more") == []


async def test_a_permit_whose_lease_ended_is_free_and_its_old_holder_cannot_release_it(
        store: Store, provider: str) -> None:
    dead = await store.take_permits(provider, 1, 1, 0.0, "proxy-killed")  # lease ends at once
    assert [p.slot for p in dead] == [1]
    live = await store.take_permits(provider, 1, 1, 30.0, "proxy-survivor")
    assert [p.slot for p in live] == [1]
    assert await store.release_permits(dead) == 0  # the slot is the survivor's now
    assert await store.take_permits(provider, 1, 1, 30.0, "proxy-other") == []
    assert await store.release_permits(live) == 1
    assert await store.release_permits(live) == 0  # released once
