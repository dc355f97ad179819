"""Queue mode in memory: the real pipeline accepting, the real delivery worker forwarding
through the real forwarder, the in-memory store on a clock moved by hand. Retries follow the
backoff schedule, the app's Retry-After, ``max_attempts`` and re-drive; an unreachable app
costs no attempt; ordering holds per key. The worker's clock and jitter are injected, so each
schedule is checked exactly, without waiting for it."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from sidecar.config.loader import parse_config
from sidecar.config.model import Config, ProviderConfig
from sidecar.core.answers import Answer, Result
from sidecar.core.events import EventState, Outcome, RecordedResponse, StoredRequest
from sidecar.forwarding.forwarder import Forwarder
from sidecar.forwarding.queueworker import QueueWorker, QueueWorkers
from sidecar.obs.metrics import Metrics
from sidecar.runtime.testing import FakeUpstream, MemoryStore, SentRequest, inbound, pipeline_for
from tests.support import base_config, stripe_event, stripe_headers


def config(**queue: Any) -> Config:
    data = base_config("http://127.0.0.1:9", "sqlite:///unused.db")
    data["providers"]["stripe"].update({
        "mode": "queue",
        # poll rarely: in these tests the worker moves only when woken
        "queue": {"first_retry": "10s", "max_retry_delay": "1h", "max_attempts": 3,
                  "poll_interval": "1h", **queue},
    })
    return parse_config(data, env={})


@dataclass
class Queue:
    """A queue-mode pipeline and one delivery worker, sharing a store and a manual clock."""

    config: Config = field(default_factory=config)
    upstream: FakeUpstream = field(default_factory=FakeUpstream)
    now: float = field(default_factory=time.time)  # signatures are stamped with real time
    metrics: Metrics = field(default_factory=Metrics)

    def __post_init__(self) -> None:
        self.store = MemoryStore(clock=self.clock)
        self.pipeline = pipeline_for(self.config, store=self.store, upstream=self.upstream,
                                     clock=self.clock, metrics=self.metrics)
        forwarder = Forwarder(self.store, self.upstream, self.metrics, set(), clock=self.clock)
        self.worker = QueueWorker(self.provider, self.store, forwarder, self.metrics, "w1",
                                  set(), clock=self.clock, rand=lambda: 0.5)
        self.task: asyncio.Task[None] | None = None

    def clock(self) -> float:
        return self.now

    @property
    def provider(self) -> ProviderConfig:
        found = self.config.provider("stripe")
        assert found is not None
        return found

    async def __aenter__(self) -> Queue:
        self.task = asyncio.create_task(self.worker.run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.worker.stop()
        assert self.task is not None
        await asyncio.wait_for(self.task, 2)
        await self.worker.finish(asyncio.get_running_loop().time() + 2)

    async def send(self, event_id: str, **extra: Any) -> Answer:
        body = stripe_event(event_id, **extra)
        answer = await self.pipeline.deliver(self.provider, inbound(
            body, stripe_headers(body), path="/webhooks/stripe?x=1"))
        self.worker.wake()
        return answer

    async def advance(self, seconds: float) -> None:
        self.now += seconds
        self.worker.wake()
        await settle()

    async def state(self, event_id: str) -> EventState:
        row = await self.store.get("stripe", event_id)
        assert row is not None
        return row.state

    def attempts(self) -> list[str | None]:
        return [r.headers.get("X-Webhook-Sidecar-Attempt") for r in self.upstream.requests]


async def settle() -> None:
    """Let the worker run until nothing more happens without the clock moving."""
    for _ in range(50):
        await asyncio.sleep(0)


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 2.0) -> None:
    """Until ``check`` holds, bounded: most steps take a few turns of the loop; the paused
    provider's take real (short) time."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    for _ in itertools.count():
        if await check():
            return
        if loop.time() > deadline:
            pytest.fail(f"not within {timeout}s: {check}")
        await asyncio.sleep(0.001)


def replies(*answers: RecordedResponse | Outcome) -> Callable[[SentRequest], Any]:
    script = list(answers)
    return lambda _: script.pop(0) if len(script) > 1 else script[0]


def status(code: int, **headers: str) -> RecordedResponse:
    return RecordedResponse(code, tuple(headers.items()), b"{}")


def done(q: Queue, event_id: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return await q.state(event_id) is EventState.DONE
    return check


async def test_accepted_at_once_then_delivered_with_forward_modes_headers() -> None:
    q = Queue()
    q.upstream.gate.clear()  # the app is slow: the provider's answer does not wait for it
    async with q:
        answer = await q.send("evt_1")
        assert answer.status == 200 and answer.result is Result.QUEUED
        assert json.loads(answer.body) == {"accepted": True, "event_id": "evt_1"}
        assert ("X-Webhook-Sidecar-Queued", "true") in answer.headers
        await asyncio.wait_for(q.upstream.arrived.wait(), 2)
        q.upstream.gate.set()
        await eventually(done(q, "evt_1"))
    sent = q.upstream.requests[0]
    assert sent.path == "/webhooks/stripe?x=1" and sent.body == stripe_event("evt_1")
    assert sent.headers["Idempotency-Key"] == "stripe:evt_1"
    assert sent.headers["X-Webhook-Sidecar-Event-Id"] == "evt_1"
    assert sent.headers["X-Webhook-Sidecar-Attempt"] == "1"
    assert "Stripe-Signature" in sent.headers


async def test_a_redelivery_is_answered_accepted_without_the_app() -> None:
    q = Queue()
    async with q:
        first = await q.send("evt_1")
        await eventually(done(q, "evt_1"))
        again = await q.send("evt_1")
        await settle()
    assert first.result is Result.QUEUED
    assert again.status == 200 and again.result is Result.DUPLICATE
    assert ("X-Webhook-Sidecar-Replay", "true") in again.headers
    assert len(q.upstream.requests) == 1


async def test_a_redelivery_with_another_body_follows_the_mismatch_policy() -> None:
    data = base_config("http://127.0.0.1:9", "sqlite:///unused.db")
    data["providers"]["stripe"].update({"mode": "queue", "on_payload_mismatch": "reject",
                                        "queue": {"poll_interval": "1h"}})
    q = Queue(config=parse_config(data, env={}))
    q.upstream.gate.clear()
    async with q:
        await q.send("evt_1")
        other = await q.send("evt_1", livemode=True)
        q.upstream.gate.set()
    assert other.status == 422 and other.result is Result.PAYLOAD_MISMATCH


async def test_failures_retry_on_the_backoff_schedule() -> None:
    q = Queue()
    q.upstream.reply = replies(status(500), status(502), status(200))
    async with q:
        await q.send("evt_1")
        await eventually(lambda: _is(q, "evt_1", EventState.QUEUED, attempts=1))
        # first_retry 10 s, equal jitter at 0.5: 7.5 s after the first failure
        await q.advance(7.4)
        assert q.attempts() == ["1"]
        await q.advance(0.2)
        await eventually(lambda: _is(q, "evt_1", EventState.QUEUED, attempts=2))
        # then 20 s doubled: 15 s
        await q.advance(14.9)
        assert q.attempts() == ["1", "2"]
        await q.advance(0.2)
        await eventually(done(q, "evt_1"))
    assert q.attempts() == ["1", "2", "3"]
    entry = await q.store.queue_entry("stripe", "evt_1")
    assert entry is None


async def test_the_apps_retry_after_is_honoured() -> None:
    q = Queue()
    q.upstream.reply = replies(status(503, **{"Retry-After": "120"}), status(200))
    async with q:
        await q.send("evt_1")
        await eventually(lambda: _is(q, "evt_1", EventState.QUEUED, attempts=1))
        await q.advance(119.9)
        assert q.attempts() == ["1"]
        await q.advance(0.2)
        await eventually(done(q, "evt_1"))
    assert q.attempts() == ["1", "2"]


async def test_max_attempts_leads_to_dead_and_a_redrive_delivers_once() -> None:
    q = Queue()
    q.upstream.reply = replies(status(500))
    async with q:
        await q.send("evt_1")
        for tried in (1, 2):  # each retry is due only once the try before it is settled
            await eventually(lambda tried=tried: _is(q, "evt_1", EventState.QUEUED,
                                                    attempts=tried))
            await q.advance(3600)
        await eventually(lambda: _is(q, "evt_1", EventState.DEAD, attempts=3))
        await q.advance(3600 * 24)
        assert q.attempts() == ["1", "2", "3"]  # dead: never tried again by itself
        entry = await q.store.queue_entry("stripe", "evt_1")
        assert entry is not None and entry.due_at is None
        assert entry.last_error == "the app answered 500"
        assert q.metrics.dead_lettered.labels("stripe")._value.get() == 1

        q.upstream.reply = replies(status(200))
        assert await q.store.requeue_dead("stripe", "evt_1") == ["evt_1"]
        q.worker.wake()  # as the store's NOTIFY does in a running proxy
        await eventually(done(q, "evt_1"))
        await q.advance(3600)
    assert q.attempts() == ["1", "2", "3", "4"]


async def test_an_unreachable_app_costs_no_attempt_and_pauses_the_provider() -> None:
    q = Queue(config=config(first_retry="100ms", max_retry_delay="200ms", concurrency=4))
    reachable = asyncio.Event()

    def app(_: SentRequest) -> RecordedResponse | Outcome:
        return status(200) if reachable.is_set() else Outcome.CONNECT_ERROR

    q.upstream.reply = app
    async with q:
        for n in range(6):
            await q.send(f"evt_{n}")
        # While down: one probe at a time, each given back (still attempt 0 on the row, once
        # the probe in flight, if any, has been settled: probes are 100-200 ms apart).
        async def given_back() -> bool:
            rows = [await q.store.get("stripe", f"evt_{n}") for n in range(6)]
            return await _tried(q, 4) and all(
                r is not None and r.attempt == 0 and r.state is EventState.QUEUED for r in rows)

        await eventually(given_back)
        reachable.set()
        for n in range(6):
            await eventually(done(q, f"evt_{n}"), timeout=5)
    firsts: dict[str, str] = {}
    for request in q.upstream.requests:
        firsts.setdefault(request.headers["X-Webhook-Sidecar-Event-Id"],
                          request.headers["X-Webhook-Sidecar-Attempt"])
    assert set(firsts.values()) == {"1"}
    assert q.metrics.queue_attempts.labels("stripe", "http://127.0.0.1:9",
                                                  "unreachable")._value.get() >= 4


async def test_events_of_one_order_key_go_one_at_a_time_in_order() -> None:
    q = Queue(config=config(order_key="$.data.object.id", concurrency=10))
    q.upstream.gate.clear()
    async with q:
        for n in range(3):
            await q.send(f"a_{n}", data={"object": {"id": "cus_A"}})
            await q.send(f"b_{n}", data={"object": {"id": "cus_B"}})
        await q.send("loose")  # no key: not held back
        await eventually(lambda: _arrived(q, 3))
        await settle()
        assert sorted(map(str, q.upstream.event_ids())) == ["a_0", "b_0", "loose"]
        for _ in range(3):
            q.upstream.gate.set()
            await settle()
            q.upstream.gate.clear()
        q.upstream.gate.set()
        for event_id in ("a_2", "b_2"):
            await eventually(done(q, event_id))
    ids = q.upstream.event_ids()
    assert [i for i in ids if i and i.startswith("a_")] == ["a_0", "a_1", "a_2"]
    assert [i for i in ids if i and i.startswith("b_")] == ["b_0", "b_1", "b_2"]


async def test_past_max_queue_depth_new_events_get_503_and_nothing_is_stored() -> None:
    q = Queue(config=config(max_queue_depth=2))
    q.upstream.gate.clear()
    async with q:
        answers = [await q.send(f"evt_{n}") for n in range(3)]
        again = await q.send("evt_0")  # an accepted event is still answered as such
        q.upstream.gate.set()
    assert [a.status for a in answers] == [200, 200, 503]
    assert answers[2].result is Result.QUEUE_FULL
    assert dict(answers[2].headers)["Retry-After"] == "30"
    assert await q.store.get("stripe", "evt_2") is None
    assert again.status == 200


async def test_stopping_lets_the_forward_in_flight_finish_and_leaves_the_rest_queued() -> None:
    q = Queue(config=config(concurrency=1))
    q.upstream.gate.clear()
    async with q:
        await q.send("evt_1")
        await q.send("evt_2")
        await asyncio.wait_for(q.upstream.arrived.wait(), 2)
        q.worker.stop()
        q.upstream.gate.set()
        await q.worker.finish(asyncio.get_running_loop().time() + 2)
    assert await q.state("evt_1") is EventState.DONE
    assert await q.state("evt_2") is EventState.QUEUED
    assert q.upstream.event_ids() == ["evt_1"]


async def _is(q: Queue, event_id: str, state: EventState, *, attempts: int) -> bool:
    row = await q.store.get("stripe", event_id)
    return row is not None and row.state is state and len(q.upstream.requests) == attempts


async def _tried(q: Queue, count: int) -> bool:
    return len(q.upstream.requests) >= count


async def _arrived(q: Queue, count: int) -> bool:
    return len(q.upstream.requests) >= count


async def test_an_event_failed_in_forward_mode_finishes_in_forward_mode_after_a_switch() -> None:
    forward_config = parse_config(base_config("http://127.0.0.1:9", "sqlite:///u.db"), env={})
    q = Queue()
    q.upstream.reply = replies(status(500), status(200))
    before = pipeline_for(forward_config, store=q.store, upstream=q.upstream, clock=q.clock)
    body = stripe_event("evt_1")
    first = await before.deliver(forward_config.providers[0], inbound(body, stripe_headers(body)))
    assert first.status == 500 and await q.state("evt_1") is EventState.FAILED
    async with q:  # the provider now in queue mode: its retry is forwarded, not queued
        again = await q.send("evt_1")
    assert again.status == 200 and again.result is Result.TAKEOVER
    assert q.attempts() == ["1", "2"]
    assert await q.store.queue_entry("stripe", "evt_1") is None


async def test_an_event_in_flight_in_forward_mode_is_waited_on_after_a_switch() -> None:
    """Its row is processing without a queue entry: queue mode leaves it to forward mode's
    rules, which wait for that attempt and answer its result, never "accepted" for an event
    no worker would deliver."""
    forward_config = parse_config(base_config("http://127.0.0.1:9", "sqlite:///u.db"), env={})
    q = Queue()
    before = pipeline_for(forward_config, store=q.store, upstream=q.upstream, clock=q.clock)
    body = stripe_event("evt_1")
    q.upstream.gate.clear()  # the forward-mode attempt is held at the app
    first = asyncio.create_task(before.deliver(forward_config.providers[0],
                                               inbound(body, stripe_headers(body))))
    await asyncio.wait_for(q.upstream.arrived.wait(), 2)
    again = asyncio.create_task(q.send("evt_1"))  # the provider now in queue mode
    await settle()
    assert not again.done(), "waiting on the attempt in flight"
    q.upstream.gate.set()
    assert (await asyncio.wait_for(first, 2)).result is Result.NEW
    answer = await asyncio.wait_for(again, 2)
    assert (answer.status, answer.result) == (200, Result.DUPLICATE)
    assert len(q.upstream.requests) == 1
    assert await q.store.queue_entry("stripe", "evt_1") is None


async def test_store_trouble_is_answered_503_and_the_provider_keeps_the_event() -> None:
    q = Queue()
    await q.store.close()  # every verb now raises StoreError, as a store that is down
    answer = await q.send("evt_1")
    assert answer.status == 503 and answer.result is Result.STORE_ERROR
    assert dict(answer.headers)["Retry-After"] == "5"
    assert q.upstream.requests == []


async def test_while_the_app_is_unreachable_one_probe_at_a_time() -> None:
    q = Queue(config=config(first_retry="50ms", max_retry_delay="50ms", concurrency=4))
    q.upstream.reply = lambda _: Outcome.CONNECT_ERROR
    async with q:
        for n in range(3):
            await q.send(f"evt_{n}")
        await eventually(lambda: _tried(q, 3))  # the first take: every free slot
        q.upstream.arrived.clear()
        q.upstream.gate.clear()  # the probe hangs (an app that drops connections)
        await asyncio.wait_for(q.upstream.arrived.wait(), 2)
        assert len(q.upstream.requests) == 4
        for _ in range(5):  # new work and polls find a probe in flight: no second one
            await q.send(f"more_{_}")
            await settle()
        assert len(q.upstream.requests) == 4
        q.upstream.gate.set()


async def test_a_bug_in_the_forward_is_an_attempt_retried_not_a_stuck_event() -> None:
    q = Queue()

    def broken(_: SentRequest) -> RecordedResponse:
        raise RuntimeError("a bug")

    q.upstream.reply = broken
    async with q:
        await q.send("evt_1")
        await eventually(lambda: _is(q, "evt_1", EventState.QUEUED, attempts=1))
    entry = await q.store.queue_entry("stripe", "evt_1")
    assert entry is not None and entry.last_error == "internal error: RuntimeError"
    row = await q.store.get("stripe", "evt_1")
    assert row is not None and row.attempt == 1 and row.outcome is Outcome.DISCONNECTED


class HeldTakes(MemoryStore):
    """Takes wait at ``gate`` once ``hold`` is set: a take in progress at shutdown."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.hold = False
        self.gate = asyncio.Event()
        self.waiting = asyncio.Event()

    async def take_queued(self, *args: Any, **kwargs: Any) -> Any:
        if self.hold:
            self.waiting.set()
            await self.gate.wait()
        return await super().take_queued(*args, **kwargs)


async def test_shutdown_drains_forwards_of_a_take_that_was_in_progress() -> None:
    cfg = config()
    store = HeldTakes()
    upstream = FakeUpstream()
    metrics = Metrics()
    forwarder = Forwarder(store, upstream, metrics, set())
    workers = QueueWorkers(cfg.providers, store, forwarder, metrics, "w1", set(),
                           notify=False)
    pipeline = pipeline_for(cfg, store=store, upstream=upstream, metrics=metrics)
    workers.start()
    store.hold = True
    body = stripe_event("evt_1")
    provider = cfg.provider("stripe")
    assert provider is not None
    await pipeline.deliver(provider, inbound(body, stripe_headers(body)))
    workers.wake("stripe")
    await asyncio.wait_for(store.waiting.wait(), 2)
    upstream.gate.clear()  # its forward will be in flight when the drain begins
    finishing = asyncio.create_task(workers.finish(asyncio.get_running_loop().time() + 5))
    await settle()
    store.gate.set()  # the take answers after the stop
    await asyncio.wait_for(upstream.arrived.wait(), 2)
    assert not finishing.done()  # waiting for that forward
    upstream.gate.set()
    await asyncio.wait_for(finishing, 5)
    row = await store.get("stripe", "evt_1")
    assert row is not None and row.state is EventState.DONE


async def test_a_queue_row_in_flight_under_forward_mode_is_answered_409_not_looped() -> None:
    """Switched back to forward mode with an event still taken by a (crashed) worker: its
    lease has ended, but take_over leaves queue rows alone, so the delivery answers 409 at
    once instead of asking again and again."""
    q = Queue()
    body = stripe_event("evt_1")
    request = StoredRequest("POST", "/webhooks/stripe", (), body)
    assert (await q.store.enqueue("stripe", "evt_1", hashlib.sha256(body).digest(),
                                  request)).accepted
    assert len(await q.store.take_queued("stripe", 1, 4.0, "crashed")) == 1
    q.now += 5  # its lease has ended
    forward_config = parse_config(base_config("http://127.0.0.1:9", "sqlite:///u.db"), env={})
    forward = pipeline_for(forward_config, store=q.store, upstream=q.upstream, clock=q.clock)
    answer = await forward.deliver(forward_config.providers[0],
                                   inbound(body, stripe_headers(body)))
    assert (answer.status, answer.reason) == (409, "queued")
    assert q.upstream.requests == []
    row = await q.store.get("stripe", "evt_1")
    assert row is not None and row.state is EventState.PROCESSING and row.attempt == 1
