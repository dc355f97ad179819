"""The headers the proxy itself sets: on forwards to the app, and on answers to providers.
A sender's copies of any of them are dropped before forwarding (see ``forwardable_headers``),
in every spelling the app could read as the proxy's: see ``cgi_name``. And how a header is read
from a request (``header_value``, ``first_header``): by the verifiers, event ids, handshakes."""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Final

OWN_PREFIX: Final = "x-webhook-sidecar-"  # headers only the proxy sets

# on every forward to the app
PROVIDER_HEADER: Final = "X-Webhook-Sidecar-Provider"
ATTEMPT_HEADER: Final = "X-Webhook-Sidecar-Attempt"  # also on answers relayed or replayed
IDEMPOTENCY_HEADER: Final = "Idempotency-Key"
EVENT_HEADER: Final = "X-Webhook-Sidecar-Event-Id"  # single events
BATCH_SIZE_HEADER: Final = "X-Webhook-Sidecar-Batch-Size"  # batch forwards
# "true": forwarded without a claim while the store could not be reached (store_outage:
# forward); the app may see this event again. Also on the answer relayed to the provider.
UNCLAIMED_HEADER: Final = "X-Webhook-Sidecar-Unclaimed"

# on answers to providers
REPLAY_HEADER: Final = "X-Webhook-Sidecar-Replay"  # "true": answered from the recorded row
QUEUED_HEADER: Final = "X-Webhook-Sidecar-Queued"  # "true": accepted in queue mode
FILTERED_HEADER: Final = "X-Webhook-Sidecar-Filtered"  # "true": dropped by the filter


_NOT_ALNUM: Final = re.compile(r"[^A-Za-z0-9]")
_PLAIN: Final = re.compile(r"[A-Za-z0-9-]+")


@functools.lru_cache(maxsize=1024)  # every forward asks of the same few dozen names
def cgi_name(name: str) -> str:
    """The variable a CGI or WSGI server (wsgiref, gunicorn, uWSGI, PHP-FPM) gives a request
    header: ``HTTP_``, then the name upper-cased with ``-`` as ``_`` (RFC 3875 §4.1.18). PHP also
    turns ``.`` into ``_``, so here every character but an ASCII letter or digit is ``_``.
    Names with one CGI name are one header to such an app: the server joins their values
    (``Idempotency-Key`` and ``Idempotency_Key`` arrive as ``HTTP_IDEMPOTENCY_KEY: a,b``)."""
    return "HTTP_" + _NOT_ALNUM.sub("_", name).upper()


def is_plain(name: str) -> bool:
    """Spelt only with ASCII letters, digits and ``-``: how every header is named by the
    proxy, by providers and by the hops in front of the proxy."""
    return _PLAIN.fullmatch(name) is not None


_OWN_CGI_PREFIX: Final = cgi_name(OWN_PREFIX)  # HTTP_X_WEBHOOK_SIDECAR_
_IDEMPOTENCY_CGI: Final = cgi_name(IDEMPOTENCY_HEADER)


def set_by_proxy(name: str, added: Collection[str]) -> bool:
    """Whether an inbound header is, to a CGI/WSGI app, one the proxy sets on a forward: any
    ``X-Webhook-Sidecar-*`` (also those not set on this forward), ``Idempotency-Key``, or one of
    ``added`` (the CGI names of the headers this forward adds, such as forward
    authentication's ``webhook-*``), in any spelling with the same CGI name."""
    cgi = cgi_name(name)
    return cgi.startswith(_OWN_CGI_PREFIX) or cgi == _IDEMPOTENCY_CGI or cgi in added


def header_value(headers: Mapping[str, str], name: str) -> str | None:
    """Case-insensitive header lookup that also works on a plain ``dict``."""
    value = headers.get(name)  # exact key first; a CIMultiDict is already case-insensitive
    if value is not None:
        return value
    wanted = name.lower()
    for key, candidate in headers.items():
        if key.lower() == wanted:
            return candidate
    return None


def first_header(headers: Mapping[str, str], names: Sequence[str]) -> str | None:
    """The value of the first of ``names`` present (alternative names for one header; a
    present but empty one still wins, so that it is reported rather than skipped)."""
    for name in names:
        value = header_value(headers, name)
        if value is not None:
            return value
    return None
