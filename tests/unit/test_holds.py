"""``forwarding.holds.Holds``, two of them as two replicas on one memory store with a clock
moved by hand: what each admits, that a transition is made (logged, counted, noticed) by one
replica once, and that of two replicas one takes the probe."""

from __future__ import annotations

import asyncio
from typing import Any

from sidecar.config.loader import parse_config
from sidecar.config.model import ProviderConfig
from sidecar.core.breaker import Admitted, Held, HoldReason, ProbeEnd
from sidecar.core.notices import Notice, NoticeKind
from sidecar.forwarding.holds import Holds
from sidecar.obs.metrics import Metrics
from sidecar.store.memory import MemoryStore
from tests.support import base_config

NOW = 1_700_000_000.0


class Recorded:
    def __init__(self) -> None:
        self.notices: list[Notice] = []

    def notice(self, notice: Notice) -> None:
        self.notices.append(notice)


def provider(**breaker: Any) -> ProviderConfig:
    data = base_config("http://127.0.0.1:9", "sqlite:///unused.db")
    data["providers"]["stripe"]["delivery"] = {"breaker": breaker} if breaker else None
    found = parse_config(data, env={}).provider("stripe")
    assert found is not None
    return found


class Replicas:
    def __init__(self, stripe: ProviderConfig) -> None:
        self.now = NOW
        self.store = MemoryStore(clock=lambda: self.now)
        self.notices = Recorded()
        self.metrics = Metrics()
        self.holds = [Holds([stripe], self.store, self.notices, self.metrics, f"r{i}",
                            clock=lambda: self.now) for i in range(2)]

    async def read(self) -> None:
        for holds in self.holds:
            await holds.read()

    def transitions(self, transition: str) -> float:
        value = self.metrics.registry.get_sample_value(
            "webhook_provider_transitions_total",
            {"provider": "stripe", "transition": transition})
        return value or 0.0


async def test_a_pause_read_by_both_replicas_holds_both_and_resume_lifts_it() -> None:
    stripe = provider()
    replicas = Replicas(stripe)
    assert await replicas.holds[0].admit(stripe) == Admitted()
    await replicas.store.pause_provider("stripe", "ops", "deploy")
    assert await replicas.holds[1].admit(stripe) == Admitted()  # not read yet: obeyed on read
    await replicas.read()
    for holds in replicas.holds:
        assert await holds.admit(stripe) == Held(HoldReason.PAUSED, 60.0)
    await replicas.store.resume_provider("stripe")
    await replicas.read()
    assert await replicas.holds[0].admit(stripe) == Admitted()


async def test_failures_open_it_once_one_replica_probes_and_its_success_closes() -> None:
    stripe = provider(failures=3, window="1m", cooldown="10s")
    replicas = Replicas(stripe)
    a, b = replicas.holds
    for holds in (a, b, a):
        await holds.ended(stripe, Admitted(), ProbeEnd.FAILED, "HTTP 500")
    assert [n.kind for n in replicas.notices.notices] == [NoticeKind.BREAKER_OPENED]
    assert replicas.notices.notices[0].detail["last_failure"] == "HTTP 500"
    assert replicas.transitions("breaker_opened") == 1
    await b.ended(stripe, Admitted(), ProbeEnd.FAILED, "HTTP 500")  # not counted: open
    await replicas.read()
    held = await b.admit(stripe)
    assert isinstance(held, Held) and held.reason is HoldReason.BREAKER_OPEN
    assert held.retry_after == 10.0

    replicas.now += 10.0  # the cooldown is over: both replicas may probe, one does
    first, second = await asyncio.gather(a.admit(stripe), b.admit(stripe))
    probes = [g for g in (first, second) if isinstance(g, Admitted)]
    assert len(probes) == 1 and probes[0].probe is not None
    assert sum(isinstance(g, Held) for g in (first, second)) == 1
    prober = a if isinstance(first, Admitted) else b
    assert isinstance(await prober.admit(stripe), Held), "one probe per replica as well"

    await prober.ended(stripe, probes[0], ProbeEnd.SUCCEEDED, "")
    assert [n.kind for n in replicas.notices.notices] == [NoticeKind.BREAKER_OPENED,
                                                          NoticeKind.BREAKER_CLOSED]
    await replicas.read()
    assert await a.admit(stripe) == Admitted() and await b.admit(stripe) == Admitted()


async def test_a_failed_probe_reopens_and_an_unused_one_is_given_back() -> None:
    stripe = provider(failures=1, window="1m", cooldown="5s")
    replicas = Replicas(stripe)
    a, _ = replicas.holds
    await a.ended(stripe, Admitted(), ProbeEnd.FAILED, "timeout")
    replicas.now += 5.0
    probe = await a.admit(stripe)
    assert isinstance(probe, Admitted) and probe.probe is not None
    await a.ended(stripe, probe, ProbeEnd.UNUSED, "")  # nothing to deliver: no verdict
    again = await a.admit(stripe)
    assert isinstance(again, Admitted) and again.probe is not None
    await a.ended(stripe, again, ProbeEnd.FAILED, "HTTP 503")
    assert replicas.transitions("breaker_reopened") == 1
    held = await a.admit(stripe)
    assert isinstance(held, Held) and held.retry_after == 5.0


async def test_without_a_breaker_failures_cost_no_statement() -> None:
    stripe = provider()
    replicas = Replicas(stripe)
    for _ in range(5):
        await replicas.holds[0].ended(stripe, Admitted(), ProbeEnd.FAILED, "HTTP 500")
    assert await replicas.store.provider_states() == []
    assert await replicas.holds[0].admit(stripe) == Admitted()
