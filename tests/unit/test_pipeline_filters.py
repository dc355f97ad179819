"""Filters and fail-open on the real pipeline, forwarder and in-memory store: a dropped event is
claimed, recorded done/filtered with its 200 and never forwarded, and its duplicates are
answered alike; a kept one is forwarded as always; batches are decided per item; queue mode
does not queue a dropped event; ``store_outage: forward`` forwards a verified delivery without
a claim when the store fails, and only then."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from sidecar.config.loader import parse_config
from sidecar.config.model import Config
from sidecar.core.answers import Result
from sidecar.core.errors import RowLocked, StoreError
from sidecar.core.events import AttemptResult, EventState, Outcome, RecordedResponse
from sidecar.runtime.testing import MemoryStore
from tests.support import base_config, stripe_event, stripe_headers
from tests.unit.test_pipeline import SENDGRID_KEY, SENDGRID_PUBLIC, World, sendgrid

DROP_UPCOMING = {"types": {"allow": ["invoice.*", "customer.subscription.*"],
                           "drop": ["invoice.upcoming"]}}


def config(stripe: dict[str, Any] | None = None, sendgrid_filter: Any = None) -> Config:
    data = base_config("http://127.0.0.1:9", "sqlite:///unused.db")
    data["providers"]["stripe"].update({"inflight_wait": "300ms", **(stripe or {})})
    data["providers"]["sendgrid"] = {"path": "/sg", "preset": "sendgrid",
                                     "secrets": [SENDGRID_PUBLIC], "lease": "4s",
                                     "inflight_wait": "300ms"}
    if sendgrid_filter is not None:
        data["providers"]["sendgrid"]["filter"] = sendgrid_filter
    return parse_config(data, env={})


async def test_a_dropped_type_is_answered_200_recorded_filtered_and_never_forwarded() -> None:
    world = World(config=config({"filter": DROP_UPCOMING}))
    answer = await world.stripe("evt_1", type="invoice.upcoming")
    assert (answer.status, answer.result) == (200, Result.FILTERED)
    assert json.loads(answer.body) == {"filtered": True, "event_id": "evt_1"}
    assert world.header(answer, "X-Webhook-Sidecar-Filtered") == "true"
    assert answer.log["filter"] == "type_dropped"
    assert answer.log["filter_rule"] == "invoice.upcoming"
    assert world.upstream.requests == []
    row = await world.store.get("stripe", "evt_1")
    assert (row.state, row.outcome, row.attempt) == (EventState.DONE, Outcome.FILTERED, 1)
    assert row.response is not None and row.response.status == 200
    [attempt] = await world.store.attempts("stripe", "evt_1")
    assert (attempt.outcome, attempt.state, attempt.status) == (
        Outcome.FILTERED, EventState.DONE, 200)


async def test_a_kept_type_is_forwarded_as_always() -> None:
    world = World(config=config({"filter": DROP_UPCOMING}))
    answer = await world.stripe("evt_1", type="invoice.paid")
    assert (answer.status, answer.result) == (200, Result.NEW)
    assert answer.log["filter"] == "passed"
    assert world.upstream.event_ids() == ["evt_1"]


async def test_duplicates_of_a_filtered_event_are_answered_the_same() -> None:
    world = World(config=config({"filter": DROP_UPCOMING}))
    first = await world.stripe("evt_1", type="charge.succeeded")
    again = await world.stripe("evt_1", type="charge.succeeded")
    assert (first.result, again.result) == (Result.FILTERED, Result.DUPLICATE)
    assert (again.status, again.body) == (first.status, first.body)
    assert world.header(again, "X-Webhook-Sidecar-Replay") == "true"
    assert world.upstream.requests == []


async def test_concurrent_copies_of_a_filtered_event_make_one_row_and_reach_no_app() -> None:
    world = World(config=config({"filter": DROP_UPCOMING}))
    answers = await asyncio.gather(*(world.stripe("evt_1", type="charge.succeeded")
                                     for _ in range(8)))
    assert {a.status for a in answers} == {200}
    assert sorted(a.result for a in answers) == sorted(
        [Result.FILTERED] + [Result.DUPLICATE] * 7)
    assert world.upstream.requests == []
    [attempt] = await world.store.attempts("stripe", "evt_1")
    assert attempt.outcome is Outcome.FILTERED


async def test_an_event_first_forwarded_then_redelivered_after_a_filter_keeps_its_answer(
) -> None:
    """The filter decides what a claim it wins does; a done row answers for itself."""
    store = MemoryStore()
    before = World(store=store)
    assert (await before.stripe("evt_1", type="charge.succeeded")).result is Result.NEW
    after = World(config=config({"filter": DROP_UPCOMING}), store=store)
    again = await after.stripe("evt_1", type="charge.succeeded")
    assert (again.status, again.result) == (200, Result.DUPLICATE)
    assert (await store.get("stripe", "evt_1")).outcome is Outcome.RESPONSE


async def test_conditions_on_body_fields() -> None:
    world = World(config=config({"filter": {"when": [{"path": "$.livemode",
                                                       "equals": True}]}}))
    test_mode = await world.stripe("evt_1", livemode=False)
    live = await world.stripe("evt_2", livemode=True)
    missing = await world.stripe("evt_3")
    assert [a.result for a in (test_mode, live, missing)] == [
        Result.FILTERED, Result.NEW, Result.FILTERED]
    assert missing.log["filter_rule"] == "$.livemode equals true"
    assert world.upstream.event_ids() == ["evt_2"]


async def test_a_batch_is_filtered_per_item() -> None:
    world = World(config=config(sendgrid_filter={"types": {"drop": ["open", "click"]}}))
    body = json.dumps([{"sg_event_id": "a", "event": "delivered"},
                       {"sg_event_id": "b", "event": "open"},
                       {"sg_event_id": "c", "event": "bounce"}]).encode()
    answer = await world.send("sendgrid", *_signed(body))
    assert (answer.status, answer.result) == (200, Result.NEW)
    assert answer.log["batch_filtered"] == 1
    [sent] = world.upstream.requests
    assert [item["sg_event_id"] for item in json.loads(sent.body)] == ["a", "c"]
    assert sent.headers["X-Webhook-Sidecar-Batch-Size"] == "2"
    assert (await world.store.get("sendgrid", "b")).outcome is Outcome.FILTERED
    assert (await world.store.get("sendgrid", "a")).outcome is Outcome.RESPONSE
    again = await world.send("sendgrid", *_signed(body))  # every item done now
    assert (again.status, again.result) == (200, Result.DUPLICATE)
    assert len(world.upstream.requests) == 1


async def test_a_batch_whose_items_are_all_dropped_reaches_no_app() -> None:
    world = World(config=config(sendgrid_filter={"types": {"allow": ["bounce"]}}))
    answer = await world.send("sendgrid", *sendgrid("a", "b"))  # both "delivered"
    assert (answer.status, answer.result) == (200, Result.FILTERED)
    assert world.upstream.requests == []
    for event_id in ("a", "b"):
        assert (await world.store.get("sendgrid", event_id)).outcome is Outcome.FILTERED


async def test_queue_mode_does_not_queue_a_dropped_event() -> None:
    world = World(config=config({"mode": "queue", "filter": DROP_UPCOMING}))
    answer = await world.stripe("evt_1", type="invoice.upcoming")
    assert (answer.status, answer.result) == (200, Result.FILTERED)
    assert json.loads(answer.body) == {"accepted": True, "event_id": "evt_1"}
    assert world.header(answer, "X-Webhook-Sidecar-Queued") == "true"
    assert await world.store.queue_entry("stripe", "evt_1") is None
    row = await world.store.get("stripe", "evt_1")
    assert (row.state, row.outcome) == (EventState.DONE, Outcome.FILTERED)
    again = await world.stripe("evt_1", type="invoice.upcoming")
    assert (again.status, again.result) == (200, Result.DUPLICATE)
    kept = await world.stripe("evt_2", type="invoice.paid")
    assert kept.result is Result.QUEUED
    assert await world.store.queue_entry("stripe", "evt_2") is not None


class FilteredRecordFails(MemoryStore):
    async def complete(self, provider: str, event_id: str, attempt: int,
                       result: AttemptResult) -> bool:
        if result.outcome is Outcome.FILTERED:
            raise StoreError("complete: connection lost")
        return await super().complete(provider, event_id, attempt, result)


async def test_a_failed_filtered_record_is_503_and_frees_the_kept_items() -> None:
    world = World(config=config(sendgrid_filter={"types": {"drop": ["open"]}}),
                  store=FilteredRecordFails())
    body = json.dumps([{"sg_event_id": "a", "event": "delivered"},
                       {"sg_event_id": "b", "event": "open"}]).encode()
    answer = await world.send("sendgrid", *_signed(body))
    assert (answer.status, answer.result) == (503, Result.STORE_ERROR)
    assert world.upstream.requests == []
    kept = await world.store.get("sendgrid", "a")
    assert kept.state is EventState.FAILED and not kept.lease_live, "free for the retry at once"


# -- store_outage --------------------------------------------------------------------------

class ClaimsFail(MemoryStore):
    """A store that cannot be reached at the claim (or whose row is held: ``error``)."""

    def __init__(self, error: StoreError, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.error = error

    async def claim(self, *args: Any, **kwargs: Any) -> Any:
        raise self.error

    async def claim_guarded(self, *args: Any, **kwargs: Any) -> Any:
        raise self.error

    async def bind_nonce(self, *args: Any, **kwargs: Any) -> Any:
        raise self.error


async def test_by_default_a_store_outage_is_503() -> None:
    world = World(store=ClaimsFail(StoreError("connection refused")))
    answer = await world.stripe("evt_1")
    assert (answer.status, answer.result) == (503, Result.STORE_ERROR)
    assert world.upstream.requests == []


async def test_store_outage_forward_sends_it_unclaimed_and_relays_the_app() -> None:
    world = World(config=config({"store_outage": "forward"}),
                  store=ClaimsFail(StoreError("connection refused")))
    world.upstream.reply = lambda _: RecordedResponse(201, (("X-App", "yes"),), b"made")
    answer = await world.stripe("evt_1")
    assert (answer.status, answer.body, answer.result) == (201, b"made", Result.UNCLAIMED)
    assert world.header(answer, "X-Webhook-Sidecar-Unclaimed") == "true"
    assert world.header(answer, "X-App") == "yes"
    [sent] = world.upstream.requests
    assert sent.headers["X-Webhook-Sidecar-Unclaimed"] == "true"
    assert sent.headers["X-Webhook-Sidecar-Event-Id"] == "evt_1"
    assert "X-Webhook-Sidecar-Attempt" not in sent.headers, "no claim, no attempt number"
    assert answer.log["unclaimed"] is True and "connection refused" in str(answer.log["error"])
    assert world.metrics.registry.get_sample_value(
        "webhook_unclaimed_forwards_total", {"provider": "stripe"}) == 1
    again = await world.stripe("evt_1")  # no dedupe while the store is out
    assert again.result is Result.UNCLAIMED and len(world.upstream.requests) == 2


async def test_store_outage_forward_keeps_the_filter() -> None:
    world = World(config=config({"store_outage": "forward", "filter": DROP_UPCOMING}),
                  store=ClaimsFail(StoreError("connection refused")))
    answer = await world.stripe("evt_1", type="invoice.upcoming")
    assert (answer.status, answer.result) == (200, Result.FILTERED)
    assert world.upstream.requests == []


async def test_a_held_row_is_not_a_store_outage() -> None:
    world = World(config=config({"store_outage": "forward"}),
                  store=ClaimsFail(RowLocked("row is locked")))
    answer = await world.stripe("evt_1")
    assert answer.status == 503 and world.upstream.requests == []


async def test_an_inbound_unclaimed_header_never_reaches_the_app() -> None:
    world = World()
    body = stripe_event("evt_1")
    headers = {**stripe_headers(body), "X-Webhook-Sidecar-Unclaimed": "true"}
    assert (await world.send("stripe", body, headers)).result is Result.NEW
    assert "X-Webhook-Sidecar-Unclaimed" not in world.upstream.requests[0].headers


def _signed(body: bytes) -> tuple[bytes, dict[str, str]]:
    """SendGrid's signature over a body of our own (its ECDSA key, as test_pipeline's)."""
    ts = str(int(time.time()))
    signature = SENDGRID_KEY.sign(ts.encode() + body, ec.ECDSA(hashes.SHA256()))
    return body, {"X-Twilio-Email-Event-Webhook-Signature": base64.b64encode(signature).decode(),
                  "X-Twilio-Email-Event-Webhook-Timestamp": ts}

