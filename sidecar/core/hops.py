"""What crosses a hop: the request headers the app gets from the proxy, and the app's response
headers a replay may repeat. Pure rules over header pairs; the client to the app
(``sidecar.forwarding.upstream``) applies them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from sidecar.core.forwarded import is_forwarding, misspelt_forwarding
from sidecar.core.headers import cgi_name, set_by_proxy

# RFC 9110 §7.6.1 plus the older RFC 7230 list: never forwarded by a proxy.
HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding",
    "upgrade", "proxy-authenticate", "proxy-authorization",
})
# Framing and identity the client sets itself for the new hop.
_REQUEST_DROP = HOP_BY_HOP | {"host", "content-length"}
# Not replayed: framing (the body may be truncated), per-hop metadata. Content-Encoding is:
# the body is kept as the app encoded it.
_RESPONSE_DROP = HOP_BY_HOP | {"content-length", "date", "server", "set-cookie"}


_TRACEPARENT: Final = cgi_name("traceparent")
_TRACESTATE: Final = cgi_name("tracestate")


def forwardable_headers(
    headers: Iterable[tuple[str, str]], added: dict[str, str]
) -> list[tuple[str, str]]:
    """Request headers for the upstream hop: hop-by-hop ones and any named in ``Connection``
    removed, then ``added`` (the proxy's own) appended. So that a sender cannot spoof what only
    the proxy says (event id, attempt, key, forward signature), one rule: an incoming header
    whose CGI name (``core.headers.cgi_name``) is a header the proxy sets is dropped — every
    ``X-Webhook-Sidecar-*``, ``Idempotency-Key``, each of ``added``, and a forwarding header
    spelt otherwise than ``core.forwarded`` sets it (``X_Forwarded_For``). A CGI/WSGI app would
    read ``Idempotency_Key`` as ``Idempotency-Key``, its value joined with ours.

    A ``traceparent`` the proxy sets (its forward span, when tracing) replaces the trace
    context: an incoming ``tracestate`` describes the replaced parent and is dropped with it.

    ``webhook-id``, ``webhook-timestamp`` and ``webhook-signature`` are the proxy's only when
    forward authentication is on (they are then in ``added``); otherwise a Standard Webhooks
    provider's own reach the app as sent, for the app to verify."""
    pairs = list(headers)
    # A sender's Connection header may not strip the forwarding headers the proxy set itself
    # (``core.forwarded`` has already decided which of them the app gets).
    named = {
        token.strip().lower()
        for name, value in pairs if name.lower() == "connection"
        for token in value.split(",") if not is_forwarding(token.strip())
    }
    dropped = _REQUEST_DROP | named
    ours = {cgi_name(name) for name in added}
    if _TRACEPARENT in ours:  # the proxy's span is the parent now: a state of the old one is not
        ours.add(_TRACESTATE)
    # ``headers`` hold the forwarding headers core.forwarded chose, plainly spelt; another
    # spelling can only be in a request stored before that rule dropped it.
    kept = [(n, v) for n, v in pairs
            if n.lower() not in dropped and not set_by_proxy(n, ours)
            and not misspelt_forwarding(n)]
    return kept + list(added.items())


def replayable_headers(headers: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    return tuple((n, v) for n, v in headers if n.lower() not in _RESPONSE_DROP)
