"""What a process already knows (``core.known``): done events and replay-guard bindings, so a
duplicate needs no database. The memory as a data structure (bounds, expiry, what it keeps), then
the pipeline with a store that counts its calls: a duplicate of a done event this process has
seen makes none, and answers exactly as the row would."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from sidecar.config.loader import parse_config
from sidecar.config.model import Config
from sidecar.core.answers import Answer, Result
from sidecar.core.events import EventRow, EventState, Outcome, RecordedResponse
from sidecar.core.known import ENTRY_OVERHEAD, KnownAnswers
from sidecar.testing import FakeUpstream, MemoryStore, inbound, pipeline_for
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
                    Outcome.RESPONSE, RecordedResponse(200, (), body), 1.0, now)


def test_done_rows_are_kept_until_retention_would_delete_them() -> None:
    clock = Clock()
    known = KnownAnswers(1 << 20, clock)
    known.remember_done(done_row("evt_1", received=0.0, now=30.0), retention=100.0)
    assert known.done("stripe", "evt_1") is not None
    clock.now += 69.0  # the row is 99 s old
    assert known.done("stripe", "evt_1") is not None
    clock.now += 1.0  # 100 s: retention deletes it, so does the memory
    assert known.done("stripe", "evt_1") is None and len(known) == 0


def test_only_done_rows_are_kept() -> None:
    known = KnownAnswers(1 << 20, Clock())
    for state in (EventState.PROCESSING, EventState.FAILED):
        known.remember_done(done_row("evt_x", state=state), retention=100.0)
    assert len(known) == 0


def test_the_memory_is_bounded_in_bytes_least_recently_used_first() -> None:
    body = b"x" * 1000
    known = KnownAnswers(3 * (ENTRY_OVERHEAD + 1000), Clock())
    for event_id in ("a", "b", "c"):
        known.remember_done(done_row(event_id, body), retention=100.0)
    assert known.done("stripe", "a") is not None  # now the most recently used
    known.remember_done(done_row("d", body), retention=100.0)
    assert [e for e in "abcd" if known.done("stripe", e)] == ["a", "c", "d"]
    assert known.size <= 3 * (ENTRY_OVERHEAD + 1000)
    known.remember_done(done_row("huge", b"y" * 10_000), retention=100.0)  # never fits
    assert known.done("stripe", "huge") is None and len(known) == 3


def test_zero_capacity_keeps_nothing() -> None:
    known = KnownAnswers(0, Clock())
    known.remember_done(done_row("a"), retention=100.0)
    known.remember_bound("github", "body:00", b"i" * 32, retention=100.0)
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
