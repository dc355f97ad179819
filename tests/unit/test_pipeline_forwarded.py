"""Forwarding headers through the real pipeline and forwarder (``sidecar.runtime.testing``):
what the app receives and what is stored for re-drive follow the trusted-hops rule; the signature is
verified on the headers as received."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from sidecar.config.loader import parse_config
from sidecar.config.model import Config
from sidecar.core.answers import Result
from sidecar.core.events import RecordedResponse
from sidecar.forwarding.forwarder import Forwarder
from sidecar.obs.metrics import Metrics
from sidecar.ops.events import redrive
from sidecar.runtime.testing import FakeUpstream, MemoryStore, inbound, pipeline_for
from tests.support import base_config, stripe_event, stripe_headers

FORGED = [  # values found nowhere else in a request
    ("X-Forwarded-For", "6.6.6.6"),
    ("X-Forwarded-Proto", "gopher"),
    ("X-Forwarded-Host", "bank.example"),
    ("X-Forwarded-Port", "4443"),
    ("Forwarded", "for=6.6.6.6;host=bank.example;proto=gopher"),
    ("X-Real-IP", "6.6.6.7"),
]
FORGED_VALUES = {value for _, value in FORGED}
ACME_SECRET = "acme-secret"


def config(**top: Any) -> Config:
    data = base_config("http://127.0.0.1:9", "sqlite:///unused.db", **top)
    data["providers"]["stripe"]["store_payload"] = True
    # A scheme that signs a forwarding header: verification must see it as received.
    data["providers"]["acme"] = {
        "path": "/acme", "secrets": [ACME_SECRET], "event_id": {"json": "$.id"},
        "signature": {"algorithm": "hmac-sha256", "header": "X-Acme-Signature",
                      "format": {"type": "plain"}, "encoding": "hex",
                      "message": "{header:X-Forwarded-For}.{body}"}}
    return parse_config(data, env={})


def forwarding(headers: Any) -> list[tuple[str, str]]:
    """The forwarding headers among ``headers`` (a sent request's), in order."""
    return [(n, v) for n, v in headers.items()
            if n.lower().startswith("x-forwarded-") or n.lower() in ("forwarded", "x-real-ip")]


async def test_forged_forwarding_headers_from_an_untrusted_peer_never_reach_the_app() -> None:
    upstream = FakeUpstream()
    pipeline = pipeline_for(config(), upstream=upstream)
    body = stripe_event("evt_1")
    signed = stripe_headers(body)
    headers = [("Host", "hooks.example.com"), *signed.items(), *FORGED]
    answer = await pipeline.deliver(config().providers[0], inbound(
        body, headers, peer="203.0.113.9", scheme="https"))
    assert answer.result is Result.NEW
    [sent] = upstream.requests
    assert forwarding(sent.headers) == [("X-Forwarded-For", "203.0.113.9"),
                                        ("X-Forwarded-Proto", "https"),
                                        ("X-Forwarded-Host", "hooks.example.com")]
    assert not FORGED_VALUES & set(sent.headers.values())
    assert sent.headers["Stripe-Signature"] == signed["Stripe-Signature"]  # the rest as sent


async def test_a_trusted_peer_is_appended_and_its_proto_and_host_kept() -> None:
    upstream = FakeUpstream()
    trusted = config(trusted_proxies=["10.0.0.0/8"])
    pipeline = pipeline_for(trusted, upstream=upstream)
    body = stripe_event("evt_1")
    headers = [*stripe_headers(body).items(), ("Host", "sidecar.internal"),
               ("X-Forwarded-For", "198.51.100.7"), ("X-Forwarded-Proto", "https"),
               ("X-Forwarded-Host", "hooks.example.com"), ("X-Real-IP", "198.51.100.7")]
    await pipeline.deliver(trusted.providers[0], inbound(body, headers, peer="10.1.2.3"))
    [sent] = upstream.requests
    assert dict(forwarding(sent.headers)) == {
        "X-Forwarded-For": "198.51.100.7, 10.1.2.3", "X-Forwarded-Proto": "https",
        "X-Forwarded-Host": "hooks.example.com", "X-Real-IP": "198.51.100.7"}


async def test_an_untrusted_peer_is_not_appended_to_even_with_trusted_proxies_set() -> None:
    upstream = FakeUpstream()
    trusted = config(trusted_proxies=["10.0.0.0/8"])
    pipeline = pipeline_for(trusted, upstream=upstream)
    body = stripe_event("evt_1")
    await pipeline.deliver(trusted.providers[0], inbound(
        body, [*stripe_headers(body).items(), *FORGED], peer="192.0.2.1"))
    [sent] = upstream.requests
    assert forwarding(sent.headers) == [("X-Forwarded-For", "192.0.2.1"),
                                        ("X-Forwarded-Proto", "http")]


async def test_the_signature_is_verified_on_the_headers_as_received() -> None:
    upstream = FakeUpstream()
    cfg = config()
    pipeline = pipeline_for(cfg, upstream=upstream)
    body = b'{"id":"evt_a"}'
    digest = hmac.new(ACME_SECRET.encode(), b"6.6.6.6." + body, hashlib.sha256).hexdigest()
    acme = cfg.provider("acme")
    assert acme is not None
    answer = await pipeline.deliver(acme, inbound(
        body, {"X-Forwarded-For": "6.6.6.6", "X-Acme-Signature": digest},
        peer="203.0.113.9"))
    assert answer.status == 200, answer.body
    [sent] = upstream.requests
    assert sent.headers.getall("X-Forwarded-For") == ["203.0.113.9"]


async def test_the_request_stored_for_redrive_has_the_rewritten_headers() -> None:
    """A re-drive is sent with the first delivery's forwarding headers: its peer, not the
    operator's, and never the forged ones."""
    failing = FakeUpstream(reply=lambda _: RecordedResponse(500, (), b""))
    store = MemoryStore()
    cfg = config()
    pipeline = pipeline_for(cfg, store=store, upstream=failing)
    body = stripe_event("evt_1")
    headers = [("Host", "hooks.example.com"), *stripe_headers(body).items(), *FORGED]
    answer = await pipeline.deliver(cfg.providers[0], inbound(body, headers,
                                                              peer="203.0.113.9"))
    assert answer.result is Result.UPSTREAM_ERROR
    payload = await store.get_payload("stripe", "evt_1")
    assert payload is not None
    assert forwarding(dict(payload.headers)) == forwarding(failing.requests[0].headers)
    assert not FORGED_VALUES & {v for _, v in payload.headers}

    app = FakeUpstream()
    result = await redrive(cfg, store, Forwarder(store, app, Metrics(), set()), "operator",
                           "stripe", "evt_1")
    assert result.attempt == 2 and result.state == "done"
    [again] = app.requests
    assert forwarding(again.headers) == [("X-Forwarded-For", "203.0.113.9"),
                                         ("X-Forwarded-Proto", "http"),
                                         ("X-Forwarded-Host", "hooks.example.com")]


async def test_a_batch_forward_follows_the_rule_too() -> None:
    data = base_config("http://127.0.0.1:9", "sqlite:///unused.db")
    data["providers"]["batch"] = {
        "path": "/b", "secrets": [ACME_SECRET], "event_id": {"batch": {
            "items": "$[*]", "item_id": {"json": "$.id"}}},
        "signature": {"algorithm": "hmac-sha256", "header": "X-Sig", "encoding": "hex",
                      "format": {"type": "plain"},
                      "message": "{body}"}}
    cfg = parse_config(data, env={})
    upstream = FakeUpstream()
    pipeline = pipeline_for(cfg, upstream=upstream)
    body = json.dumps([{"id": "a"}, {"id": "b"}]).encode()
    signature = hmac.new(ACME_SECRET.encode(), body, hashlib.sha256).hexdigest()
    provider = cfg.provider("batch")
    assert provider is not None
    answer = await pipeline.deliver(provider, inbound(
        body, [("X-Sig", signature), *FORGED], peer="203.0.113.9"))
    assert answer.status == 200
    [sent] = upstream.requests
    assert forwarding(sent.headers) == [("X-Forwarded-For", "203.0.113.9"),
                                        ("X-Forwarded-Proto", "http")]


async def test_a_senders_connection_header_cannot_strip_the_proxys_forwarding_headers() -> None:
    # "Connection: X-Forwarded-For" would make a hop-by-hop filter drop the header the proxy
    # just set; an underscore spelling is a forwarding header too (WSGI maps both alike).
    upstream = FakeUpstream()
    pipeline = pipeline_for(config(), upstream=upstream)
    body = stripe_event("evt_1")
    headers = [("Host", "hooks.example.com"), *stripe_headers(body).items(),
               ("Connection", "keep-alive, X-Forwarded-For, X-Forwarded-Proto, X-Forwarded-Host"),
               ("X_Forwarded_For", "6.6.6.6")]
    answer = await pipeline.deliver(config().providers[0], inbound(
        body, headers, peer="203.0.113.9"))
    assert answer.result is Result.NEW
    sent = upstream.requests[0].headers
    assert sent["X-Forwarded-For"] == "203.0.113.9"
    assert sent["X-Forwarded-Proto"] == "http"
    assert sent["X-Forwarded-Host"] == "hooks.example.com"
    assert "6.6.6.6" not in [value for _, value in sent.items()]
