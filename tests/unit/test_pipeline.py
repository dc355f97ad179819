"""The delivery pipeline, in memory: every rule of the behaviour table on the real pipeline, the
real forwarder and the in-memory store, with deliveries signed by the providers' SDKs (stripe)
or keys (SendGrid's ECDSA, Slack's HMAC). No sockets, no database: each test takes
milliseconds, and each is named after the rule it checks."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from sidecar.config.loader import parse_config
from sidecar.config.model import Config, ProviderConfig
from sidecar.core.answers import Answer, Result
from sidecar.core.errors import StoreError
from sidecar.core.events import Claim, EventState, Outcome, RecordedResponse, StoredRequest
from sidecar.delivery import Pipeline
from sidecar.obs.metrics import Metrics
from sidecar.runtime.testing import FakeUpstream, MemoryStore, inbound, pipeline_for
from tests.support import base_config, stripe_event, stripe_headers

SENDGRID_KEY = ec.generate_private_key(ec.SECP256R1())
SENDGRID_PUBLIC = base64.b64encode(SENDGRID_KEY.public_key().public_bytes(
    serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)).decode()
SLACK_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"


def config(**stripe: Any) -> Config:
    data = base_config("http://127.0.0.1:9", "sqlite:///unused.db")
    data["providers"]["stripe"].update({"inflight_wait": "300ms", **stripe})
    data["providers"]["sendgrid"] = {"path": "/sg", "preset": "sendgrid",
                                     "secrets": [SENDGRID_PUBLIC], "lease": "4s",
                                     "inflight_wait": "300ms"}
    return parse_config(data, env={})


def sendgrid(*event_ids: str) -> tuple[bytes, dict[str, str]]:
    body = json.dumps([{"sg_event_id": e, "event": "delivered"} for e in event_ids]).encode()
    ts = str(int(time.time()))
    signature = SENDGRID_KEY.sign(ts.encode() + body, ec.ECDSA(hashes.SHA256()))
    return body, {"X-Twilio-Email-Event-Webhook-Signature": base64.b64encode(signature).decode(),
                  "X-Twilio-Email-Event-Webhook-Timestamp": ts}


def slack(body: bytes) -> dict[str, str]:
    ts = str(int(time.time()))
    digest = hmac.new(SLACK_SECRET.encode(), f"v0:{ts}:".encode() + body, hashlib.sha256)
    return {"X-Slack-Signature": "v0=" + digest.hexdigest(), "X-Slack-Request-Timestamp": ts}


class WatchedStore(MemoryStore):
    """Sets ``reread`` when a delivery reads a row again: it has waited on an attempt."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.reread = asyncio.Event()

    async def get(self, provider: str, event_id: str) -> Any:
        self.reread.set()
        return await super().get(provider, event_id)


@dataclass
class World:
    """A pipeline with its store, app and clock (the store's lease clock can be moved on)."""

    config: Config = field(default_factory=config)
    upstream: FakeUpstream = field(default_factory=FakeUpstream)
    skew: float = 0.0
    metrics: Metrics = field(default_factory=Metrics)
    store: Any = None
    pipeline: Pipeline | None = None

    def __post_init__(self) -> None:
        self.store = self.store or WatchedStore(clock=self.clock)
        self.pipeline = pipeline_for(self.config, store=self.store, upstream=self.upstream,
                                     clock=self.clock, metrics=self.metrics)

    def clock(self) -> float:
        return time.time() + self.skew

    def provider(self, key: str) -> ProviderConfig:
        found = self.config.provider(key)
        assert found is not None
        return found

    async def stripe(self, event_id: str, **extra: Any) -> Answer:
        body = stripe_event(event_id, **extra)
        return await self.send("stripe", body, stripe_headers(body))

    async def send(self, provider: str, body: bytes, headers: dict[str, str]) -> Answer:
        assert self.pipeline is not None
        return await self.pipeline.deliver(self.provider(provider), inbound(body, headers))

    def header(self, answer: Answer, name: str) -> str | None:
        return next((v for n, v in answer.headers if n.lower() == name.lower()), None)


def reply(status: int, body: bytes = b"{}", **headers: str) -> Callable[[Any], RecordedResponse]:
    return lambda _: RecordedResponse(status, tuple(headers.items()), body)


# -- rules that answer from one delivery -------------------------------------------------------

@dataclass(frozen=True)
class Case:
    rule: str
    app: Callable[[Any], RecordedResponse | Outcome]
    status: int
    result: Result
    state: EventState
    from_app: bool = True  # the app's own answer is relayed (else the proxy's JSON error)


CASES = [
    Case("first delivery, app 2xx: forwarded once, relayed, done",
         reply(200, b'{"ok":1}'), 200, Result.NEW, EventState.DONE),
    Case("first delivery, app 4xx: relayed with Retry-After, failed (only 2xx is done)",
         reply(404), 404, Result.UPSTREAM_ERROR, EventState.FAILED),
    Case("first delivery, app 5xx: relayed with Retry-After, failed",
         reply(500), 500, Result.UPSTREAM_ERROR, EventState.FAILED),
    Case("first delivery, app timeout: 504, failed",
         lambda _: Outcome.TIMEOUT, 504, Result.UPSTREAM_ERROR, EventState.FAILED, False),
    Case("first delivery, app refused the connection: 502, failed",
         lambda _: Outcome.CONNECT_ERROR, 502, Result.UPSTREAM_ERROR, EventState.FAILED, False),
]


@pytest.mark.parametrize("case", CASES, ids=[c.rule for c in CASES])
async def test_first_delivery(case: Case) -> None:
    world = World(upstream=FakeUpstream(reply=case.app))
    answer = await world.stripe("evt_1")
    assert (answer.status, answer.result) == (case.status, case.result), case.rule
    assert len(world.upstream.requests) == 1, case.rule
    row = await world.store.get("stripe", "evt_1")
    assert row.state is case.state and row.attempt == 1, case.rule
    if case.from_app:
        assert world.header(answer, "X-Webhook-Sidecar-Attempt") == "1"
    else:
        assert json.loads(answer.body)["reason"] == answer.reason
    if case.state is EventState.FAILED:
        assert world.header(answer, "Retry-After") == "1", "a failure tells the provider when"
    assert answer.log["event_id"] == "evt_1" and answer.log["attempt"] == 1


@pytest.mark.parametrize(("rule", "body", "headers", "status", "reason"), [
    ("a missing signature is 401", b'{"id":"evt_x"}', {}, 401, "missing_signature"),
    ("a verified body without an event id is 400", b'{"object":"event"}', None, 400,
     "missing_event_id"),
    ("a verified body that is not JSON is 400", b"not json", None, 400, "invalid_json"),
])
async def test_refused_before_anything_is_stored(rule: str, body: bytes,
                                                 headers: dict[str, str] | None, status: int,
                                                 reason: str) -> None:
    world = World()
    answer = await world.send("stripe", body,
                              headers if headers is not None else stripe_headers(body))
    assert answer.status == status and answer.reason == reason, rule
    assert json.loads(answer.body)["reason"] == reason
    assert world.upstream.requests == [] and await world.store.list_events() == [], rule


async def test_an_app_404_leaves_the_event_for_the_providers_retry_to_the_fixed_app() -> None:
    statuses = iter([404, 200])  # misdeployed, then fixed
    world = World(upstream=FakeUpstream(reply=lambda _: RecordedResponse(next(statuses), (),
                                                                         b"")))
    first = await world.stripe("evt_1")
    assert first.status == 404 and first.result is Result.UPSTREAM_ERROR
    assert first.log["app_status_class"] == "4xx"
    assert (await world.store.get("stripe", "evt_1")).state is EventState.FAILED
    retry = await world.stripe("evt_1")
    assert retry.status == 200 and retry.result is Result.TAKEOVER
    assert [r.headers["X-Webhook-Sidecar-Attempt"] for r in world.upstream.requests] == ["1", "2"]
    answers = world.metrics.registry.get_sample_value
    app = {"provider": "stripe", "upstream": "http://127.0.0.1:9"}
    assert answers("webhook_app_answers_total", {**app, "status_class": "4xx"}) == 1
    assert answers("webhook_app_answers_total", {**app, "status_class": "2xx"}) == 1


async def test_a_final_status_is_recorded_and_replayed() -> None:
    world = World(config=config(final_statuses=[422]), upstream=FakeUpstream(reply=reply(422)))
    first = await world.stripe("evt_1")
    assert first.status == 422 and first.result is Result.NEW
    assert (await world.store.get("stripe", "evt_1")).state is EventState.DONE
    again = await world.stripe("evt_1")
    assert again.status == 422 and again.result is Result.DUPLICATE
    assert world.header(again, "X-Webhook-Sidecar-Replay") == "true"
    assert len(world.upstream.requests) == 1, "a recorded rejection is not sent again"


# -- rules where another delivery's row decides --------------------------------------------

async def test_a_redelivery_of_a_done_event_is_answered_from_the_row() -> None:
    world = World(upstream=FakeUpstream(reply=reply(201, b'{"id":7}', **{"X-App": "a"})))
    await world.stripe("evt_1")
    again = await world.stripe("evt_1")
    assert (again.status, again.body, again.result) == (201, b'{"id":7}', Result.DUPLICATE)
    assert world.header(again, "X-Webhook-Sidecar-Replay") == "true"
    assert world.header(again, "X-App") == "a"
    assert len(world.upstream.requests) == 1, "a duplicate never reaches the app"


async def test_a_duplicate_while_in_flight_waits_and_mirrors_the_outcome() -> None:
    world = World(config=config(inflight_wait="3s"))
    world.upstream.gate.clear()
    first = asyncio.create_task(world.stripe("evt_1"))
    await world.upstream.arrived.wait()
    second = asyncio.create_task(world.stripe("evt_1"))
    await world.store.reread.wait()  # the second delivery found the live lease and waited
    world.upstream.gate.set()
    done, mirrored = await asyncio.gather(first, second)
    assert done.result is Result.NEW and mirrored.result is Result.DUPLICATE
    assert mirrored.status == 200
    assert len(world.upstream.requests) == 1


async def test_a_duplicate_still_in_flight_after_the_wait_is_409_with_retry_after() -> None:
    world = World()  # inflight_wait 300ms, lease 4s
    world.upstream.gate.clear()
    first = asyncio.create_task(world.stripe("evt_1"))
    await world.upstream.arrived.wait()
    busy = await world.stripe("evt_1")
    assert busy.status == 409 and busy.result is Result.IN_FLIGHT
    assert 1 <= int(world.header(busy, "Retry-After") or 0) <= 4, "at most the lease left"
    world.upstream.gate.set()
    assert (await first).status == 200
    assert len(world.upstream.requests) == 1, "never a second forward while in flight"


async def test_a_waiter_mirrors_a_failure_instead_of_retrying_it() -> None:
    world = World(config=config(inflight_wait="3s"),
                  upstream=FakeUpstream(reply=reply(503)))
    world.upstream.gate.clear()
    first = asyncio.create_task(world.stripe("evt_1"))
    await world.upstream.arrived.wait()
    second = asyncio.create_task(world.stripe("evt_1"))
    await world.store.reread.wait()
    world.upstream.gate.set()
    failed, mirrored = await asyncio.gather(first, second)
    assert failed.status == 503 and mirrored.status == 503
    assert mirrored.result is Result.MIRRORED_FAILURE
    assert world.header(mirrored, "Retry-After") == "1"
    assert len(world.upstream.requests) == 1, "a burst of copies is not a burst of retries"


async def test_a_failed_event_is_taken_over_as_the_next_attempt() -> None:
    statuses = iter([500, 200])
    world = World(upstream=FakeUpstream(reply=lambda _: RecordedResponse(next(statuses), (),
                                                                         b"")))
    assert (await world.stripe("evt_1")).status == 500
    again = await world.stripe("evt_1")
    assert again.status == 200 and again.result is Result.TAKEOVER
    assert [r.headers["X-Webhook-Sidecar-Attempt"] for r in world.upstream.requests] == ["1", "2"]
    assert (await world.store.get("stripe", "evt_1")).state is EventState.DONE


async def test_a_crashed_attempt_is_taken_over_after_its_lease() -> None:
    world = World()
    body = stripe_event("evt_1")
    # A delivery that claimed the event and died before recording anything.
    claim = await world.store.claim("stripe", "evt_1", hashlib.sha256(body).digest(), 4.0, "x")
    assert claim.won
    world.skew = 5.0  # past the 4 s lease
    answer = await world.send("stripe", body, stripe_headers(body))
    assert answer.status == 200 and answer.result is Result.TAKEOVER
    assert world.upstream.requests[0].headers["X-Webhook-Sidecar-Attempt"] == "2"


@pytest.mark.parametrize(("policy", "status", "result"), [
    ("duplicate", 200, Result.DUPLICATE),  # answered as the duplicate it claims to be
    ("reject", 422, Result.PAYLOAD_MISMATCH),
])
async def test_the_same_id_with_another_body(policy: str, status: int, result: Result) -> None:
    world = World(config=config(on_payload_mismatch=policy))
    await world.stripe("evt_1", n=1)
    answer = await world.stripe("evt_1", n=2)
    assert (answer.status, answer.result) == (status, result)
    assert answer.log.get("payload_mismatch") is True
    mismatches = world.metrics.registry.get_sample_value(
        "webhook_payload_mismatches_total", {"provider": "stripe"})
    assert mismatches == 1 and len(world.upstream.requests) == 1


# -- batches: a single event is a batch of one ---------------------------------------------

async def test_a_batch_forwards_only_the_items_this_delivery_claimed() -> None:
    world = World()
    assert (await world.send("sendgrid", *sendgrid("a"))).status == 200
    answer = await world.send("sendgrid", *sendgrid("a", "b"))
    assert answer.status == 200 and answer.log["batch_forwarded"] == 1
    sent = json.loads(world.upstream.requests[1].body)
    assert [e["sg_event_id"] for e in sent] == ["b"], "an item already done is never resent"
    assert world.upstream.requests[1].headers["X-Webhook-Sidecar-Batch-Size"] == "1"


async def test_a_batch_whose_items_are_all_done_is_replayed() -> None:
    world = World()
    await world.send("sendgrid", *sendgrid("a", "b"))
    again = await world.send("sendgrid", *sendgrid("b", "a"))
    assert again.result is Result.DUPLICATE and len(world.upstream.requests) == 1


async def test_a_batch_with_an_item_in_flight_elsewhere_is_not_2xx() -> None:
    world = World()
    world.upstream.gate.clear()
    first = asyncio.create_task(world.send("sendgrid", *sendgrid("a")))
    await world.upstream.arrived.wait()
    world.upstream.arrived.clear()
    pending = asyncio.create_task(world.send("sendgrid", *sendgrid("a", "b")))
    await world.upstream.arrived.wait()  # "b" forwarded; "a" still held by the first delivery
    world.upstream.gate.set()
    answer = await pending
    assert answer.status == 409, "the provider must retry: item a is not known done"
    assert (await first).status == 200


class SecondClaimFails(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.claims = 0

    async def claim(self, provider: str, event_id: str, body_sha256: bytes,
                    lease_seconds: float, owner: str,
                    payload: StoredRequest | None = None) -> Claim:
        self.claims += 1
        if self.claims == 2:
            raise StoreError("claim: connection lost")
        return await super().claim(provider, event_id, body_sha256, lease_seconds, owner,
                                   payload)


async def test_a_store_failure_mid_batch_is_503_and_frees_what_it_claimed() -> None:
    world = World(store=SecondClaimFails())
    answer = await world.send("sendgrid", *sendgrid("a", "b"))
    assert answer.status == 503 and answer.result is Result.STORE_ERROR
    assert world.header(answer, "Retry-After") == "5"
    assert world.upstream.requests == []
    row = await world.store.get("sendgrid", "a")
    assert row.state is EventState.FAILED and not row.lease_live, "free for the retry at once"


# -- answered by the proxy itself ----------------------------------------------------------

async def test_a_handshake_is_answered_without_a_row_or_the_app() -> None:
    world = World()
    body = json.dumps({"type": "url_verification", "challenge": "c-123"}).encode()
    answer = await world.send("slack", body, slack(body))
    assert answer.status == 200 and answer.result is Result.HANDSHAKE
    assert json.loads(answer.body) == {"challenge": "c-123"}
    assert world.upstream.requests == [] and await world.store.list_events() == []


class BrokenStore(MemoryStore):
    async def claim(self, *args: Any, **kwargs: Any) -> Claim:
        raise RuntimeError("a bug")


async def test_a_bug_is_answered_500_and_keeps_its_traceback_for_the_log() -> None:
    world = World(store=BrokenStore())
    answer = await world.stripe("evt_1")
    assert answer.status == 500 and answer.result is Result.ERROR
    assert isinstance(answer.log["exc_info"], RuntimeError)
    assert world.upstream.requests == []


async def test_a_takeover_meeting_a_locked_row_is_409_not_a_held_connection() -> None:
    statuses = iter([500, 200])
    world = World(upstream=FakeUpstream(reply=lambda _: RecordedResponse(next(statuses), (),
                                                                         b"")))
    assert (await world.stripe("evt_1")).status == 500  # failed: the next one takes it over
    async with world.store.hold_row("stripe", "evt_1"):
        locked = await world.stripe("evt_1")
    assert locked.status == 409 and locked.result is Result.IN_FLIGHT
    assert locked.reason == "row_locked" and world.header(locked, "Retry-After") == "1"
    assert (await world.stripe("evt_1")).status == 200, "taken over once the lock is gone"


class ThirdClaimFails(MemoryStore):
    """Fails the third claim; each result write waits until two are in progress at once."""

    def __init__(self) -> None:
        super().__init__()
        self.claims = 0
        self.writing = 0
        self.together = asyncio.Event()

    async def claim(self, provider: str, event_id: str, body_sha256: bytes,
                    lease_seconds: float, owner: str,
                    payload: StoredRequest | None = None) -> Claim:
        self.claims += 1
        if self.claims == 3:
            raise StoreError("claim: connection lost")
        return await super().claim(provider, event_id, body_sha256, lease_seconds, owner,
                                   payload)

    async def complete(self, *args: Any) -> bool:
        self.writing += 1
        if self.writing == 2:
            self.together.set()
        await asyncio.wait_for(self.together.wait(), 2)  # one at a time would time out
        return await super().complete(*args)


async def test_the_items_claimed_before_a_store_failure_are_freed_together() -> None:
    # One by one, a batch's 503 could wait a store deadline per claimed item.
    world = World(store=ThirdClaimFails())
    answer = await world.send("sendgrid", *sendgrid("a", "b", "c"))
    assert answer.status == 503 and world.store.together.is_set()
    for event_id in ("a", "b"):
        row = await world.store.get("sendgrid", event_id)
        assert row.state is EventState.FAILED and not row.lease_live
