"""Which inbound headers may reach the app
(``sidecar.core.hops.forwardable_headers``): none that
a CGI or WSGI server (wsgiref, gunicorn, uWSGI, PHP-FPM) would read as a header the proxy sets
on the forward, in whatever spelling it arrives. As a truth table, and as a property over
arbitrary headers."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.core.headers import cgi_name
from sidecar.core.hops import forwardable_headers

Headers = tuple[tuple[str, str], ...]

# What the proxy adds to a single event's forward, without and with forward authentication.
ADDED = {"X-Webhook-Sidecar-Provider": "stripe", "X-Webhook-Sidecar-Attempt": "2",
         "Idempotency-Key": "stripe:evt_1", "X-Webhook-Sidecar-Event-Id": "evt_1"}
SIGNED = {**ADDED, "webhook-id": "stripe:evt_1", "webhook-timestamp": "1700000000",
          "webhook-signature": "v1,abc="}
SIG = ("Stripe-Signature", "t=1,v1=ab")


@dataclass(frozen=True)
class Case:
    rule: str
    headers: Headers
    kept: Headers
    added: tuple[tuple[str, str], ...] = tuple(ADDED.items())


CASES = [
    Case("the proxy's own headers in their dash spelling: dropped (as before)",
         (SIG, ("Idempotency-Key", "forged"), ("X-Webhook-Sidecar-Attempt", "1")), (SIG,)),
    Case("Idempotency-Key with an underscore: dropped",
         (("Idempotency_Key", "stripe:evt_forged"), SIG), (SIG,)),
    Case("in any case",
         (("IDEMPOTENCY_KEY", "x"), ("idempotency_key", "y"), SIG), (SIG,)),
    Case("X-Webhook-Sidecar-* with underscores anywhere: dropped",
         (("X_Webhook_Sidecar_Attempt", "1"), ("X-Webhook_Sidecar-Event-Id", "evt_forged"),
          ("x_webhook_sidecar_provider", "github"), SIG), (SIG,)),
    Case("X-Webhook-Sidecar-* not set on this forward, in any spelling: dropped too",
         (("X_Webhook_Sidecar_Batch_Size", "9"), ("X-Webhook-Sidecar_Replay", "true"),
          ("X_WEBHOOK_SIDECAR_QUEUED", "true"), SIG), (SIG,)),
    Case("PHP also reads '.' as '_': Idempotency.Key is the same variable",
         (("Idempotency.Key", "x"), ("X.Webhook.Sidecar.Attempt", "1"), SIG), (SIG,)),
    Case("look-alikes with another CGI name are someone else's: kept",
         (("Idempotency-Keys", "a"), ("Idempotency", "b"), ("X-Webhook-Sidecar", "c"),
          ("X-Webhook-Sidecarx-Attempt", "d"), ("Webhook-Ids", "e"), SIG),
         (("Idempotency-Keys", "a"), ("Idempotency", "b"), ("X-Webhook-Sidecar", "c"),
          ("X-Webhook-Sidecarx-Attempt", "d"), ("Webhook-Ids", "e"), SIG)),
    Case("without forward authentication the provider's own webhook-* reach the app as sent",
         (("webhook-id", "msg_1"), ("webhook-timestamp", "1"), ("webhook-signature", "v1,x"),
          ("Webhook_Id", "msg_2")),
         (("webhook-id", "msg_1"), ("webhook-timestamp", "1"), ("webhook-signature", "v1,x"),
          ("Webhook_Id", "msg_2"))),
    Case("with forward authentication every spelling of webhook-* is the proxy's",
         (("webhook-id", "msg_1"), ("Webhook_Id", "msg_2"), ("WEBHOOK_TIMESTAMP", "1"),
          ("webhook_signature", "v1,forged"), ("Webhook.Signature", "v1,forged"), SIG),
         (SIG,), tuple(SIGNED.items())),
    Case("forwarding headers as core.forwarded set them: kept; other spellings: dropped",
         (("X-Forwarded-For", "127.0.0.1"), ("X_Forwarded_For", "6.6.6.6"),
          ("X-Forwarded-Proto", "http"), ("x_forwarded_proto", "gopher"),
          ("X_Real_IP", "6.6.6.6"), ("Forwarded_", "for=x"), SIG),
         (("X-Forwarded-For", "127.0.0.1"), ("X-Forwarded-Proto", "http"),
          ("Forwarded_", "for=x"), SIG)),
    Case("a trusted hop's trace context: kept while the proxy sets none of its own",
         (("traceparent", "00-ab-cd-01"), ("tracestate", "vendor=opaque"), SIG),
         (("traceparent", "00-ab-cd-01"), ("tracestate", "vendor=opaque"), SIG)),
    Case("the proxy's traceparent (tracing on): the inbound tracestate goes with the old one",
         (("traceparent", "00-ab-cd-01"), ("tracestate", "vendor=opaque"),
          ("Tracestate", "x=1"), SIG),
         (SIG,), (*ADDED.items(), ("traceparent", "00-12-34-01"))),
    Case("hop-by-hop headers and those Connection names: dropped, as before",
         (("Connection", "close, X-Custom"), ("X-Custom", "1"), ("Keep-Alive", "5"),
          ("Host", "h"), ("Content-Length", "3"), SIG), (SIG,)),
]


@pytest.mark.parametrize("case", CASES, ids=[c.rule for c in CASES])
def test_rule(case: Case) -> None:
    assert forwardable_headers(case.headers, dict(case.added)) \
        == [*case.kept, *case.added]


@pytest.mark.parametrize(("name", "cgi"), [
    ("Idempotency-Key", "HTTP_IDEMPOTENCY_KEY"), ("idempotency_key", "HTTP_IDEMPOTENCY_KEY"),
    ("Idempotency.Key", "HTTP_IDEMPOTENCY_KEY"), ("X-Webhook_Sidecar-Event-Id",
                                                  "HTTP_X_WEBHOOK_SIDECAR_EVENT_ID"),
    ("webhook-id", "HTTP_WEBHOOK_ID"), ("X-Real-IP", "HTTP_X_REAL_IP"),
])
def test_cgi_name(name: str, cgi: str) -> None:
    assert cgi_name(name) == cgi


# -- a property over arbitrary headers ---------------------------------------------------------

def _environ_name(name: str) -> str:
    """The oracle: wsgiref's mapping (``-`` as ``_``, upper case) plus PHP's (``.`` as ``_``)."""
    return "HTTP_" + name.replace("-", "_").replace(".", "_").upper()


_NAMES = ["Idempotency-Key", "X-Webhook-Sidecar-Attempt", "X-Webhook-Sidecar-Event-Id",
          "X-Webhook-Sidecar-Replay", "webhook-id", "webhook-timestamp", "webhook-signature",
          "Stripe-Signature", "Content-Type", "X-Forwarded-For", "User-Agent"]


@st.composite
def _name(draw: st.DrawFn) -> str:
    """A header name: one of the proxy's or a neighbour's, in any case with any of its dashes
    spelt as ``_`` or ``.``; or anything made of the characters that matter."""
    if draw(st.booleans()):
        return draw(st.text(st.sampled_from("idkeyIDKEYwhxX-_."), min_size=1, max_size=20))
    known = draw(st.sampled_from(_NAMES))
    dashes = iter(draw(st.lists(st.sampled_from("-_."), min_size=known.count("-"),
                                max_size=known.count("-"))))
    flips = draw(st.lists(st.booleans(), min_size=len(known), max_size=len(known)))
    return "".join(next(dashes) if c == "-" else c.swapcase() if flip else c
                   for c, flip in zip(known, flips, strict=True))


@settings(max_examples=300, deadline=None)
@given(headers=st.lists(st.tuples(_name(), st.text(max_size=10)), max_size=12),
       signed=st.booleans())
def test_no_inbound_header_shares_a_cgi_name_with_one_the_proxy_sets(
        headers: list[tuple[str, str]], signed: bool) -> None:
    added = SIGNED if signed else ADDED
    out = forwardable_headers(headers, added)
    assert out[-len(added):] == list(added.items())
    inbound = [_environ_name(n) for n, _ in out[:-len(added)]]
    assert not {_environ_name(n) for n in added} & set(inbound)
    assert not [c for c in inbound if c.startswith("HTTP_X_WEBHOOK_SIDECAR_")]
