"""What a process already knows (``core.known``): done events, events accepted in queue mode and
replay-guard bindings, so a duplicate needs no database. The memory as a data structure (bounds,
expiry, what it keeps), then the pipeline with a store that counts its calls: a duplicate of a
done event this process has seen makes none, and answers exactly as the row would. Last, the
same histories with the memory on and off, on a clock moved by hand: it never answers longer
than the store keeps what it mirrors."""

from __future__ import annotations

import hashlib
import hmac
import time
from typing import Any

import pytest

from sidecar.config.loader import parse_config
from sidecar.config.model import Config
from sidecar.core.answers import Answer, Result
from sidecar.core.events import (
    AttemptResult,
    EventRow,
    EventState,
    Outcome,
    RecordedResponse,
    Settlement,
)
from sidecar.core.known import ENTRY_OVERHEAD, KnownAnswers
from sidecar.runtime.testing import FakeUpstream, MemoryStore, inbound, pipeline_for
from tests.support import base_config, stripe_event, stripe_headers

GITHUB_SECRET = "It's a Secret to Everybody"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def done_row(event_id: str, body: bytes = b"{}", *, received: float = 0.0,
             now: float = 0.0, state: EventState = EventState.DONE) -> EventRow:
    return EventRow("stripe", event_id, state, 1, b"h" * 32, received, received, None,
                    Outcome.RESPONSE, RecordedResponse(200, (), body), 1.0, now, in_queue=False)


def test_done_rows_are_kept_until_retention_would_delete_them() -> None:
    clock = Clock()
    known = KnownAnswers(1 << 20, clock)
    row = done_row("evt_1", received=0.0, now=30.0)  # read 30 s after it was received
    known.remember_done(row, known.until(clock.now, 100.0, row))
    assert known.done("stripe", "evt_1") is not None
    clock.now += 69.0  # the row is 99 s old
    assert known.done("stripe", "evt_1") is not None
    clock.now += 1.0  # 100 s: retention deletes it, so does the memory
    assert known.done("stripe", "evt_1") is None and len(known) == 0


def test_an_end_is_counted_from_the_facts_own_time_by_the_stores_clock_alone() -> None:
    """The store's clock and the memory's need not agree: only the fact's age crosses over,
    counted from the moment before the store was asked."""
    known = KnownAnswers(1 << 20, Clock())
    wall = 1_700_000_000.0  # the store's clock: epoch seconds; the memory's: anything
    assert known.until(5.0, 100.0, done_row("e", received=wall, now=wall + 30.0)) == 75.0
    assert known.until(5.0, 100.0) == 105.0  # stored by that very call: a full retention
    # A store clock behind the row's own time (stepped back) is no reason to keep it longer.
    assert known.until(5.0, 100.0, done_row("e", received=wall, now=wall - 3.0)) == 105.0


def test_hits_never_extend_an_entry_and_learning_it_again_never_moves_its_end_later() -> None:
    clock = Clock()
    known = KnownAnswers(1 << 20, clock)
    known.remember_done(done_row("evt_1"), clock.now + 100.0)
    for _ in range(9):  # a hit every 10 s
        clock.now += 10.0
        assert known.done("stripe", "evt_1") is not None
    known.remember_done(done_row("evt_1"), clock.now + 100.0)  # the same fact, learned late
    known.remember_bound("github", "body:00", b"i" * 32, clock.now + 10.0)
    known.remember_bound("github", "body:00", b"i" * 32, clock.now + 100.0)
    clock.now += 10.0  # 100 s after the first learning
    assert known.done("stripe", "evt_1") is None
    assert known.bound("github", "body:00") is None
    # Once an entry has ended, a fact learned anew (retention deleted the old one, a new
    # delivery stored it again) gets its own end.
    known.remember_done(done_row("evt_1"), clock.now + 100.0)
    clock.now += 99.0
    assert known.done("stripe", "evt_1") is not None


def test_a_fact_already_past_its_end_is_not_kept() -> None:
    clock = Clock()
    known = KnownAnswers(1 << 20, clock)
    row = done_row("evt_1", received=0.0, now=120.0)  # read after retention could delete it
    known.remember_done(row, known.until(clock.now, 100.0, row))
    known.remember_accepted("stripe", "evt_2", b"h" * 32, clock.now)
    assert len(known) == 0


def test_only_done_rows_are_kept() -> None:
    known = KnownAnswers(1 << 20, Clock())
    for state in (EventState.PROCESSING, EventState.FAILED):
        known.remember_done(done_row("evt_x", state=state), 1100.0)
    assert len(known) == 0


def test_the_memory_is_bounded_in_bytes_least_recently_used_first() -> None:
    body = b"x" * 1000
    known = KnownAnswers(3 * (ENTRY_OVERHEAD + 1000), Clock())
    for event_id in ("a", "b", "c"):
        known.remember_done(done_row(event_id, body), 1100.0)
    assert known.done("stripe", "a") is not None  # now the most recently used
    known.remember_done(done_row("d", body), 1100.0)
    assert [e for e in "abcd" if known.done("stripe", e)] == ["a", "c", "d"]
    assert known.size <= 3 * (ENTRY_OVERHEAD + 1000)
    known.remember_done(done_row("huge", b"y" * 10_000), 1100.0)  # never fits
    assert known.done("stripe", "huge") is None and len(known) == 3


def test_zero_capacity_keeps_nothing() -> None:
    known = KnownAnswers(0, Clock())
    known.remember_done(done_row("a"), 1100.0)
    known.remember_bound("github", "body:00", b"i" * 32, 1100.0)
    assert not known.enabled and len(known) == 0


# -- the pipeline: calls the store sees ---------------------------------------------------------

class CountingStore:
    """A real in-memory store that counts every verb called on it."""

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        verb = getattr(self.inner, name)
        if not callable(verb):
            return verb

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return await verb(*args, **kwargs)

        return counted


def config(**stripe: Any) -> Config:
    data = base_config("http://127.0.0.1:9", "sqlite:///unused.db")
    data["providers"]["stripe"].update(stripe)
    return parse_config(data, env={})


async def deliver_stripe(pipeline: Any, conf: Config, event_id: str, **extra: Any) -> Answer:
    body = stripe_event(event_id, **extra)
    provider = conf.provider("stripe")
    assert provider is not None
    answer: Answer = await pipeline.deliver(provider, inbound(body, stripe_headers(body)))
    return answer


async def test_a_duplicate_of_an_event_this_process_forwarded_needs_no_store_call() -> None:
    conf, store = config(), CountingStore()
    upstream = FakeUpstream(reply=lambda _: RecordedResponse(201, (("X-App", "a"),), b"{}"))
    pipeline = pipeline_for(conf, store=store, upstream=upstream)  # type: ignore[arg-type]
    first = await deliver_stripe(pipeline, conf, "evt_1")
    assert (first.status, first.result) == (201, Result.NEW)
    store.calls.clear()
    again = await deliver_stripe(pipeline, conf, "evt_1")
    assert store.calls == []
    assert (again.status, again.body, again.result, again.log.get("known")) == (
        201, b"{}", Result.DUPLICATE, True)
    assert ("X-App", "a") in again.headers and ("X-Webhook-Sidecar-Replay", "true") in again.headers
    assert len(upstream.requests) == 1


async def test_an_answer_read_from_the_store_is_remembered_too() -> None:
    """Another process's done event: the first duplicate asks the store, the next ones not."""
    conf, store = config(), CountingStore()
    elsewhere = pipeline_for(conf, store=store.inner)  # another replica on the same database
    await deliver_stripe(elsewhere, conf, "evt_1")
    pipeline = pipeline_for(conf, store=store)  # type: ignore[arg-type]
    await deliver_stripe(pipeline, conf, "evt_1")
    assert store.calls == ["claim"]
    store.calls.clear()
    assert (await deliver_stripe(pipeline, conf, "evt_1")).result is Result.DUPLICATE
    assert store.calls == []


async def test_a_remembered_event_still_applies_the_payload_mismatch_policy() -> None:
    conf = config(on_payload_mismatch="reject")
    pipeline = pipeline_for(conf, store=CountingStore())  # type: ignore[arg-type]
    await deliver_stripe(pipeline, conf, "evt_1")
    other = await deliver_stripe(pipeline, conf, "evt_1", amount=999)
    assert (other.status, other.reason) == (422, "payload_mismatch")


async def test_failed_events_are_not_remembered() -> None:
    conf, store = config(), CountingStore()
    upstream = FakeUpstream(reply=lambda _: RecordedResponse(500, (), b"{}"))
    pipeline = pipeline_for(conf, store=store, upstream=upstream)  # type: ignore[arg-type]
    assert (await deliver_stripe(pipeline, conf, "evt_1")).status == 500
    store.calls.clear()
    upstream.reply = lambda _: RecordedResponse(200, (), b"{}")
    retry = await deliver_stripe(pipeline, conf, "evt_1")
    assert (retry.status, retry.result) == (200, Result.TAKEOVER)
    assert "claim" in store.calls and len(upstream.requests) == 2


async def test_with_the_memory_off_every_duplicate_asks_the_store() -> None:
    data = base_config("http://127.0.0.1:9", "sqlite:///unused.db", answer_cache=0)
    conf, store = parse_config(data, env={}), CountingStore()
    pipeline = pipeline_for(conf, store=store)  # type: ignore[arg-type]
    await deliver_stripe(pipeline, conf, "evt_1")
    store.calls.clear()
    await deliver_stripe(pipeline, conf, "evt_1")
    assert store.calls == ["claim"]


async def test_a_github_duplicate_skips_the_replay_guard_round_trip_too() -> None:
    conf, store = config(), CountingStore()
    github = conf.provider("github")
    assert github is not None and github.guards_body_replay
    pipeline = pipeline_for(conf, store=store)  # type: ignore[arg-type]
    body = b'{"zen":"Keep it logically awesome."}'
    signature = "sha256=" + hmac.new(GITHUB_SECRET.encode(), body, hashlib.sha256).hexdigest()

    async def send(delivery: str) -> Answer:
        headers = {"X-Hub-Signature-256": signature, "X-GitHub-Delivery": delivery}
        return await pipeline.deliver(github, inbound(body, headers))

    assert (await send("d-1")).result is Result.NEW
    store.calls.clear()
    assert (await send("d-1")).result is Result.DUPLICATE
    replay = await send("d-2")  # the same body under a fresh id: refused from memory as well
    assert (replay.status, replay.reason) == (401, "replayed_body")
    assert store.calls == []


def github_sender(pipeline: Any, conf: Config) -> Any:
    github = conf.provider("github")
    assert github is not None and github.guards_body_replay

    async def send(body: bytes, delivery: str) -> Answer:
        signature = ("sha256="
                     + hmac.new(GITHUB_SECRET.encode(), body, hashlib.sha256).hexdigest())
        headers = {"X-Hub-Signature-256": signature, "X-GitHub-Delivery": delivery}
        answer: Answer = await pipeline.deliver(github, inbound(body, headers))
        return answer

    return send


async def test_a_new_github_event_binds_its_body_in_the_claim() -> None:
    """Issue 22: the replay guard's bind rides in the claim (``claim_guarded``): a new event
    is the claim and the record, no bind besides; a replay of its body is refused by the
    claim, which writes nothing."""
    conf, store = config(), CountingStore()
    send = github_sender(pipeline_for(conf, store=store), conf)  # type: ignore[arg-type]
    assert (await send(b'{"n": 1}', "d-1")).result is Result.NEW
    assert store.calls == ["claim_guarded", "complete"]
    other = pipeline_for(conf, store=store)  # type: ignore[arg-type]  # knows no binding
    store.calls.clear()
    replay = await github_sender(other, conf)(b'{"n": 1}', "d-2")
    assert (replay.status, replay.reason) == (401, "replayed_body")
    assert store.calls == ["claim_guarded"]
    assert await store.inner.get("github", "d-2") is None


async def test_a_known_done_event_whose_binding_was_forgotten_binds_alone() -> None:
    """No claim follows for an event this process knows done: its binding goes alone, as it
    always did, and the answer is the remembered one."""
    # Room for two bindings and one done row ({} with no headers): the second event's row
    # pushes out the least recently used entry, the first event's binding.
    data = base_config("http://127.0.0.1:9", "sqlite:///unused.db",
                       answer_cache=3 * ENTRY_OVERHEAD + 2 + 100)
    conf, store = parse_config(data, env={}), CountingStore()
    upstream = FakeUpstream(reply=lambda _: RecordedResponse(200, (), b"{}"))
    send = github_sender(pipeline_for(conf, store=store, upstream=upstream),  # type: ignore[arg-type]
                         conf)
    for n in (1, 2):
        assert (await send(b'{"n": %d}' % n, f"d-{n}")).result is Result.NEW
    store.calls.clear()
    again = await send(b'{"n": 1}', "d-1")
    assert (again.result, again.log.get("known")) == (Result.DUPLICATE, True)
    assert store.calls == ["bind_nonce"]
    store.calls.clear()
    replay = await send(b'{"n": 1}', "d-3")  # the binding is known again
    assert (replay.status, replay.reason, store.calls) == (401, "replayed_body", [])


async def test_queue_mode_binds_alone_before_its_enqueue() -> None:
    data = base_config("http://127.0.0.1:9", "sqlite:///unused.db")
    data["providers"]["github"]["mode"] = "queue"
    conf, store = parse_config(data, env={}), CountingStore()
    send = github_sender(pipeline_for(conf, store=store), conf)  # type: ignore[arg-type]
    assert (await send(b'{"n": 1}', "d-1")).status == 200
    assert store.calls == ["bind_nonce", "enqueue"]
    replay = await send(b'{"n": 1}', "d-2")
    assert (replay.status, replay.reason) == (401, "replayed_body")
    assert await store.inner.get("github", "d-2") is None


# -- never longer than the store: the same history, with and without the memory ----------------
#
# Each scenario runs on two pipelines sharing one store and one clock moved by hand: the one under
# test, and another replica whose deliveries make the history around it. The learner's answers
# must be the same with ``answer_cache`` on as with it off: the memory may save round trips, never
# change an answer. Retention runs as the maintenance loop runs it (``purge``, ``purge_nonces``).

RETENTION = 100.0


class World:
    """Two replicas on one in-memory store, on one hand-moved clock (signatures, the store and
    each memory read it)."""

    def __init__(self, answer_cache: int | str, *, queue: bool = False) -> None:
        self.now = time.time()
        self.store = MemoryStore(clock=self.clock)
        self.upstream = FakeUpstream(reply=lambda _: self.reply)
        self.reply: RecordedResponse | Outcome = RecordedResponse(200, (), b"{}")
        stripe: dict[str, Any] = {"retention": f"{RETENTION:g}s"}
        if queue:
            stripe.update(mode="queue", queue={"poll_interval": "1h"})
        self.config = config_with(answer_cache, stripe=stripe,
                                  github={"retention": f"{RETENTION:g}s"})
        other = config_with(0, stripe=stripe, github={"retention": f"{RETENTION:g}s"})
        self.learner = pipeline_for(self.config, store=self.store, upstream=self.upstream,
                                    clock=self.clock)
        self.other = pipeline_for(other, store=self.store, upstream=self.upstream,
                                  clock=self.clock)

    def clock(self) -> float:
        return self.now

    async def stripe(self, pipeline: Any, event_id: str) -> Result:
        body = stripe_event(event_id)
        provider = self.config.provider("stripe")
        assert provider is not None
        headers = stripe_headers(body, timestamp=int(self.now))
        return (await pipeline.deliver(provider, inbound(body, headers))).result

    async def github(self, pipeline: Any, body: bytes, delivery: str) -> Result:
        provider = self.config.provider("github")
        assert provider is not None
        signature = ("sha256="
                     + hmac.new(GITHUB_SECRET.encode(), body, hashlib.sha256).hexdigest())
        headers = {"X-Hub-Signature-256": signature, "X-GitHub-Delivery": delivery}
        return (await pipeline.deliver(provider, inbound(body, headers))).result

    async def retention(self) -> None:
        """One sweep of every provider, as ``Maintenance.sweep_retention`` does."""
        for provider in ("stripe", "github"):
            await self.store.purge(provider, RETENTION, 1000)
            await self.store.purge_nonces(provider, RETENTION, 1000)

    def attempts(self) -> list[str | None]:
        return [r.headers.get("X-Webhook-Sidecar-Attempt") for r in self.upstream.requests]


def config_with(answer_cache: int | str, **providers: dict[str, Any]) -> Config:
    data = base_config("http://127.0.0.1:9", "sqlite:///unused.db", answer_cache=answer_cache)
    for key, extra in providers.items():
        data["providers"][key].update(extra)
    return parse_config(data, env={})


CACHES = [pytest.param("16MiB", id="answer_cache-on"), pytest.param(0, id="answer_cache-off")]


@pytest.mark.parametrize("answer_cache", CACHES)
async def test_duplicates_never_keep_a_done_event_past_its_retention(
        answer_cache: int | str) -> None:
    """Duplicates arriving more often than the retention: each is a hit, and none may push the
    entry past the moment retention deletes the row. Then the event is new again, as it is for
    a replica without the memory: forwarded as attempt 1."""
    world = World(answer_cache)
    results = [await world.stripe(world.learner, "evt_1")]
    for _ in range(3):
        world.now += 30.0  # 30, 60, 90 s after receipt
        results.append(await world.stripe(world.learner, "evt_1"))
    world.now += 11.0  # 101 s: past retention
    await world.retention()
    assert await world.store.get("stripe", "evt_1") is None
    results.append(await world.stripe(world.learner, "evt_1"))
    assert results == [Result.NEW, *[Result.DUPLICATE] * 3, Result.NEW]
    assert world.attempts() == ["1", "1"]


@pytest.mark.parametrize("answer_cache", CACHES)
async def test_a_taken_over_event_is_remembered_from_its_first_receipt(
        answer_cache: int | str) -> None:
    """The row's retention counts from its first receipt, not from the takeover that ended it
    done: the memory of that answer ends with the row."""
    world = World(answer_cache)
    world.reply = RecordedResponse(500, (), b"{}")
    results = [await world.stripe(world.other, "evt_1")]
    world.now += 50.0
    world.reply = RecordedResponse(200, (), b"{}")
    results.append(await world.stripe(world.learner, "evt_1"))  # takes over, done
    world.now += 51.0  # 101 s after the first receipt
    await world.retention()
    results.append(await world.stripe(world.learner, "evt_1"))
    assert results == [Result.UPSTREAM_ERROR, Result.TAKEOVER, Result.NEW]
    assert world.attempts() == ["1", "2", "1"]


@pytest.mark.parametrize("answer_cache", CACHES)
async def test_a_body_binding_learned_from_the_store_ends_with_the_stored_binding(
        answer_cache: int | str) -> None:
    """The replay guard's binding, bound by another replica 50 s before this one learns it, is
    deleted by retention 100 s after it was bound: then the same body under a fresh delivery
    id is a new event here too, not a replayed body."""
    world = World(answer_cache)
    body = b'{"zen":"Design for failure."}'
    results = [await world.github(world.other, body, "d-1")]
    world.now += 50.0
    results.append(await world.github(world.learner, body, "d-1"))  # learns the binding
    world.now += 51.0
    await world.retention()
    results.append(await world.github(world.learner, body, "d-2"))
    results.append(await world.github(world.learner, body, "d-3"))  # bound to d-2 now
    assert results == [Result.NEW, Result.DUPLICATE, Result.NEW, Result.REPLAYED_BODY]


@pytest.mark.parametrize("answer_cache", CACHES)
async def test_an_event_accepted_in_queue_mode_is_remembered_from_its_receipt(
        answer_cache: int | str) -> None:
    """Queue mode: a replica learns 50 s after receipt that the event was accepted; once
    retention deleted the delivered row, the event is accepted anew, as without the memory."""
    world = World(answer_cache, queue=True)
    results = [await world.stripe(world.other, "evt_1")]
    taken = await world.store.take_queued("stripe", 1, 30.0, "worker")
    done = AttemptResult(EventState.DONE, Outcome.RESPONSE, RecordedResponse(200, (), b"{}"),
                         1.0)
    assert await world.store.settle_queued("stripe", "evt_1", taken[0].tries,
                                           Settlement(EventState.DONE, done))
    world.now += 50.0
    results.append(await world.stripe(world.learner, "evt_1"))  # learns "accepted"
    world.now += 51.0
    await world.retention()
    results.append(await world.stripe(world.learner, "evt_1"))
    assert results == [Result.QUEUED, Result.DUPLICATE, Result.QUEUED]
    assert await world.store.queue_entry("stripe", "evt_1") is not None


@pytest.mark.parametrize("answer_cache", CACHES)
async def test_an_event_taken_over_with_another_body_is_remembered_with_the_rows_body(
        answer_cache: int | str) -> None:
    """A take-over keeps the row's body hash (the first delivery's); so does the memory of its
    answer. Redeliveries of either body are then flagged (``payload_mismatch``) exactly as the
    store would flag them: the second body, not the first."""
    conf = config_with(answer_cache, stripe={"on_payload_mismatch": "duplicate"})
    upstream = FakeUpstream(reply=lambda _: RecordedResponse(500, (), b"{}"))
    pipeline = pipeline_for(conf, store=MemoryStore(), upstream=upstream)
    assert (await deliver_stripe(pipeline, conf, "evt_1")).status == 500  # failed, body A
    upstream.reply = lambda _: RecordedResponse(200, (), b"{}")
    taken = await deliver_stripe(pipeline, conf, "evt_1", amount=999)  # body B takes it over
    assert (taken.result, taken.log.get("payload_mismatch")) == (Result.TAKEOVER, True)
    first = await deliver_stripe(pipeline, conf, "evt_1")
    second = await deliver_stripe(pipeline, conf, "evt_1", amount=999)
    assert [first.result, second.result] == [Result.DUPLICATE, Result.DUPLICATE]
    assert [first.log.get("payload_mismatch"), second.log.get("payload_mismatch")] == [None, True]
