"""Forward mode under ``delivery.rate`` through the real pipeline, forwarder and memory store
(``tests/unit/test_pipeline.py``'s world), the store's clock moved by hand: over the rate a
delivery is 429 with Retry-After and nothing is claimed or forwarded; its retry once a token is
due is a first delivery; a duplicate answered from memory takes no token and one answered from
its row gives its token back."""

from __future__ import annotations

from dataclasses import replace

from sidecar.core.answers import Result
from tests.unit.test_pipeline import World, config
from tests.unit.test_pipeline_filters import DROP_UPCOMING
from tests.unit.test_pipeline_filters import config as filter_config


def limited(*, answer_cache: int | None = None) -> World:
    # 1 a minute, 2 at once: a third delivery waits a minute for its token.
    limits = config(delivery={"rate": "1/m", "burst": 2})
    if answer_cache is not None:
        limits = replace(limits, answer_cache=answer_cache)
    return World(config=limits)


async def test_over_the_rate_429_with_retry_after_nothing_claimed_then_forwarded() -> None:
    world = limited()
    assert (await world.stripe("evt_a")).result is Result.NEW
    assert (await world.stripe("evt_b")).result is Result.NEW
    refused = await world.stripe("evt_c")
    assert (refused.status, refused.result, refused.reason) == (429, Result.RATE_LIMITED,
                                                                "rate_limited")
    assert world.header(refused, "Retry-After") == "60"
    assert b"1/m" in refused.body
    assert await world.store.get("stripe", "evt_c") is None
    assert world.upstream.event_ids() == ["evt_a", "evt_b"]
    assert world.metrics.delivery_limited.labels("stripe", "rate")._value.get() == 1
    world.skew += 60.0  # a token is due
    retried = await world.stripe("evt_c")
    assert (retried.status, retried.result) == (200, Result.NEW)
    assert world.upstream.event_ids() == ["evt_a", "evt_b", "evt_c"]
    assert world.upstream.requests[-1].headers["X-Webhook-Sidecar-Attempt"] == "1"


async def test_a_duplicate_this_process_knows_is_answered_without_a_token() -> None:
    world = limited()
    await world.stripe("evt_a")
    await world.stripe("evt_b")  # the bucket is empty now
    replay = await world.stripe("evt_a")
    assert (replay.status, replay.result) == (200, Result.DUPLICATE)


async def test_a_duplicate_answered_from_its_row_gives_its_token_back() -> None:
    world = limited(answer_cache=0)  # no memory: the row answers
    await world.stripe("evt_a")  # one token left
    replay = await world.stripe("evt_a")  # takes it, then gives it back
    assert (replay.status, replay.result) == (200, Result.DUPLICATE)
    assert (await world.stripe("evt_b")).result is Result.NEW  # the token given back
    assert (await world.stripe("evt_c")).status == 429


async def test_without_a_rate_nothing_is_counted_or_refused() -> None:
    world = World()
    for n in range(5):
        assert (await world.stripe(f"evt_{n}")).result is Result.NEW
    assert world.store._buckets == {}


async def test_a_filtered_event_gives_its_token_back() -> None:
    """A dropped event is claimed and recorded, never forwarded: it spends no token."""
    limits = filter_config({"filter": DROP_UPCOMING, "delivery": {"rate": "1/m", "burst": 1}})
    world = World(config=limits)
    dropped = await world.stripe("evt_a", type="invoice.upcoming")
    assert (dropped.status, dropped.result) == (200, Result.FILTERED)
    kept = await world.stripe("evt_b", type="invoice.paid")
    assert (kept.status, kept.result) == (200, Result.NEW)  # the token was given back
    assert (await world.stripe("evt_c", type="invoice.paid")).status == 429
    assert world.upstream.event_ids() == ["evt_b"]
