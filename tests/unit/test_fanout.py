"""The fan-out step in memory (``sidecar.forwarding.fanout``): which destinations' queues an
event is queued in, by the set it was accepted with, or, accepted before its provider had
destinations, by the destinations it has now and their filters."""

from __future__ import annotations

import hashlib
import json

from sidecar.config.loader import parse_config
from sidecar.config.model import ProviderConfig
from sidecar.core.events import EventState, StoredRequest
from sidecar.forwarding.fanout import FanOut
from sidecar.runtime.testing import MemoryStore
from tests.support import base_config, stripe_event


def provider() -> ProviderConfig:
    data = base_config("http://127.0.0.1:9", "sqlite:///unused.db")
    data["providers"]["stripe"].update({"mode": "queue", "destinations": [
        {"name": "billing", "upstream": {"url": "http://127.0.0.1:10"}},
        {"name": "crm", "upstream": {"url": "http://127.0.0.1:11"},
         "filter": {"types": {"allow": ["invoice.*"]}}}]})
    found = parse_config(data, env={}).provider("stripe")
    assert found is not None
    return found


def request(body: bytes, destinations: tuple[str, ...] | None) -> StoredRequest:
    return StoredRequest("POST", "/webhooks/stripe", (("Content-Type", "application/json"),),
                         body, None, destinations)


async def fan_out(body: bytes, destinations: tuple[str, ...] | None
                  ) -> tuple[list[str], list[str], list[str]]:
    """The fan-out's answer, the queues it woke, and the queues holding the event after it."""
    store = MemoryStore()
    woken: list[str] = []
    sent = await FanOut(store, woken.append).send(provider(), ["evt_1"], 1,
                                                   request(body, destinations))
    assert sent.result.state is EventState.DONE and sent.response is not None
    queued = [key for key in ("stripe.billing", "stripe.crm")
              if await store.get(key, "evt_1") is not None]
    for key in queued:  # the provider's request, byte for byte, queued as attempt 0
        row, payload = await store.get(key, "evt_1"), await store.get_payload(key, "evt_1")
        assert row is not None and payload is not None
        assert (row.state, row.attempt) == (EventState.QUEUED, 0)
        assert row.body_sha256 == hashlib.sha256(body).digest()
        assert (payload.body, payload.destinations) == (body, None)
    return json.loads(sent.response.body)["destinations"], woken, queued


async def test_the_set_it_was_accepted_with_whatever_the_filters_say_now() -> None:
    body = stripe_event("evt_1", type="customer.created")  # crm's filter would drop it
    assert await fan_out(body, ("billing", "crm")) == (["billing", "crm"],
                                                       ["stripe.billing", "stripe.crm"],
                                                       ["stripe.billing", "stripe.crm"])
    assert await fan_out(body, ("crm",)) == (["crm"], ["stripe.crm"], ["stripe.crm"])
    assert await fan_out(body, ()) == ([], [], [])  # every filter dropped it at acceptance


async def test_accepted_before_the_provider_had_destinations_its_current_ones() -> None:
    invoice = stripe_event("evt_1")
    assert await fan_out(invoice, None) == (["billing", "crm"],
                                            ["stripe.billing", "stripe.crm"],
                                            ["stripe.billing", "stripe.crm"])
    customer = stripe_event("evt_1", type="customer.created")
    assert await fan_out(customer, None) == (["billing"], ["stripe.billing"],
                                             ["stripe.billing"])
