"""Queue mode's side of the limits (``forwarding.limits.ProviderLimits``) on the memory store
with its clock moved by hand: what a worker may take, what it gives back, when a permit is
released, and that a provider without limits costs no store call at all."""

from __future__ import annotations

from typing import Any

import pytest

from sidecar.config.model import ProviderConfig
from sidecar.core.limits import Limit
from sidecar.forwarding.limits import ProviderLimits
from sidecar.obs.metrics import Metrics
from sidecar.runtime.testing import MemoryStore
from tests.unit.test_pipeline import config


def stripe(**delivery: Any) -> ProviderConfig:
    found = config(mode="queue", delivery=delivery).provider("stripe")
    assert found is not None
    return found


class NoStore:
    """A store that must not be asked anything."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"store.{name} called for a provider without limits")


async def test_a_provider_without_limits_makes_no_store_call() -> None:
    limits = ProviderLimits(stripe(), NoStore(), Metrics(), "proxy-a")  # type: ignore[arg-type]
    assert not limits.active
    reserved = await limits.reserve(5)
    assert reserved.count == 5 and reserved.permits == ()
    assert list(await limits.unused(reserved, 3)) == [None, None, None]

    async def work() -> None:
        return None

    await limits.holding(None, work())


@pytest.fixture
def now() -> list[float]:
    return [1_700_000_000.0]


async def test_permits_bound_the_take_and_the_unused_go_back(now: list[float]) -> None:
    store = MemoryStore(clock=lambda: now[0])
    metrics = Metrics()
    a = ProviderLimits(stripe(concurrency=3), store, metrics, "proxy-a")
    b = ProviderLimits(stripe(concurrency=3), store, metrics, "proxy-b")
    first = await a.reserve(2)
    assert first.count == 2 and len(first.permits) == 2
    second = await b.reserve(5)  # one slot left
    assert second.count == 1
    assert metrics.delivery_limited.labels("stripe", Limit.CONCURRENCY.value)._value.get() == 1
    third = await b.reserve(1)
    assert third.count == 0 and third.wakeable and 0 < third.wait <= 0.1
    # a's take found one event of two: the other permit goes back at once.
    [held] = await a.unused(first, 1)
    assert held is not None
    assert (await b.reserve(1)).count == 1

    async def forward() -> None:
        return None

    await a.holding(held, forward())  # released once the try settled
    assert (await b.reserve(1)).count == 1


async def test_tokens_bound_the_take_and_the_wait_is_the_next_tokens(
        now: list[float]) -> None:
    store = MemoryStore(clock=lambda: now[0])
    limits = ProviderLimits(stripe(rate="10/s", burst=3), store, Metrics(), "proxy-a")
    reserved = await limits.reserve(5)
    assert reserved.count == 3 and reserved.tokens == 3
    empty = await limits.reserve(5)
    assert empty.count == 0 and not empty.wakeable
    assert empty.wait == pytest.approx(0.1)
    await limits.unused(reserved, 1)  # two tokens back: the take found one event
    assert (await limits.reserve(5)).count == 2
    now[0] += 0.25  # two and a half tokens more
    assert (await limits.reserve(5)).count == 2


async def test_tokens_then_a_permit_each_and_tokens_without_a_permit_go_back(
        now: list[float]) -> None:
    store = MemoryStore(clock=lambda: now[0])
    limits = ProviderLimits(stripe(rate="10/s", burst=5, concurrency=2), store, Metrics(),
                            "proxy-a")
    reserved = await limits.reserve(5)  # five tokens, two permits: three tokens go back
    assert reserved.count == 2 and len(reserved.permits) == 2
    blocked = await limits.reserve(5)  # tokens yes, permits no: the tokens go back again
    assert blocked.count == 0 and blocked.wakeable
    await limits.unused(reserved, 0)  # nothing found: both permits and tokens back
    assert (await limits.reserve(5)).count == 2
