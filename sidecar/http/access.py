"""Who may use the admin listener's operator side (the JSON admin API and the inspector): the
admin token when one is configured, else a loopback peer only. Shared so both read alike.

Without a token, "loopback" is a promise about the person behind the request, so it is kept
only when nothing says another host is behind the peer: a peer in ``trusted_proxies``, or a
request carrying a forwarding header (a reverse proxy on this host or in this pod), needs the
token. And since a browser on the operator's machine is on loopback too (``kubectl
port-forward``), any website it visits could drive the listener through it: by DNS rebinding
(a name of the attacker's resolving to 127.0.0.1, so the page reads answers as its own), by a
cross-site form POST, or, without a token, by cross-site GETs (an ``<img>`` pointing at a
listing whose filter makes the store walk far back, fired dozens of times).
``browser_refusal`` refuses all three; curl and the CLI send neither an ``Origin``, a
``Sec-Fetch-Site`` nor a foreign ``Host``, so they are not affected; typed URLs and bookmarks
send ``Sec-Fetch-Site: none``, the inspector's own links ``same-origin``.

Not covered, knowingly: ``/healthz``, ``/readyz``, ``/metrics`` and ``/admin/openapi.json``
answer any ``Host`` and any site (probes and Prometheus send neither header), so a rebinding page
can read ``/metrics`` through an operator's port-forward, token or not: provider names, volumes,
queue depths, partition bounds. Low sensitivity, and no secret or payload is in it."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal
from urllib.parse import urlsplit

from aiohttp import web

from sidecar.core.forwarded import FORWARDED_PROTO, Network, is_forwarding, is_trusted, peer_address

LOOPBACK = "loopback"  # the fingerprint logged for an operator served without a token
_DEFAULT_PORTS = {"http": 80, "https": 443}
# What a browser says of a request another site's page made (Fetch Metadata).
_OTHER_SITES = frozenset({"cross-site", "same-site"})


class TokenForm(StrEnum):
    """How an ``Authorization`` value carries the admin token."""

    BEARER = "bearer"
    BARE = "bare"  # the token alone: accepted, deprecated


def presents(authorization: str, token: str) -> TokenForm | None:
    """How an ``Authorization`` value carries the admin token: ``bearer`` (the scheme in any
    case, then one or more spaces: RFC 9110 §11.1), ``bare`` (the token alone, which earlier
    versions accepted too: kept so deployments sending it keep working, but deprecated), or
    None (it does not)."""
    scheme, _, credentials = authorization.partition(" ")
    if scheme.lower() == "bearer" and same(credentials.lstrip(" "), token):
        return TokenForm.BEARER
    return TokenForm.BARE if same(authorization, token) else None


def same(given: str, token: str) -> bool:
    """Constant-time equality of a presented value and the token."""
    # Header values are decoded with surrogateescape: encode them back the same way.
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), token.encode())


def from_loopback(request: web.Request, trusted: Sequence[Network] = ()) -> bool:
    """The request comes from this host itself: the peer is a loopback address (an IPv4-mapped
    one included) or a Unix socket, is not in ``trusted`` (``trusted_proxies``), and the
    request carries no forwarding header (``Forwarded``, ``X-Forwarded-*``, ``X-Real-IP``):
    a reverse proxy on this host relays other hosts' requests from loopback."""
    peer = request.transport.get_extra_info("peername") if request.transport else None
    if not peer:
        return False
    if any(is_forwarding(name) for name in request.headers):
        return False
    if isinstance(peer, str):  # a Unix socket path: local by definition
        return True
    address = peer_address(str(peer[0]))
    return (address is not None and address.is_loopback
            and not is_trusted(address, trusted))


def came_over_https(request: web.Request, trusted: Sequence[Network]) -> bool:
    """The browser reached us over https: this listener's own TLS, or a peer in ``trusted``
    (a TLS-terminating ingress) saying so with ``X-Forwarded-Proto: https``."""
    if request.secure:
        return True
    address = peer_address(request.remote)
    if address is None or not is_trusted(address, trusted):
        return False
    said = request.headers.get(FORWARDED_PROTO, "").split(",")[0].strip().lower()
    return said == "https"


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a browser's request is refused: ``reason`` for logs and the JSON answer,
    ``message`` for the operator."""

    reason: Literal["host_not_allowed", "cross_site"]
    message: str


def browser_refusal(request: web.Request, *, token_configured: bool,
                    admin_host: str) -> Refusal | None:
    """Refuses what only another website's page makes an operator's browser send: without a
    token, a ``Host`` that is not an IP literal, ``localhost`` or ``admin_host`` (DNS
    rebinding), and any request that ``Sec-Fetch-Site`` or ``Origin`` says came from another
    site; with one, such a POST (a cross-site GET carries no session cookie, which is
    ``SameSite=Strict``, nor a bearer token, so links from chat or alerts still lead to the
    login). None: go on."""
    host = request.headers.get("Host")
    if not token_configured and not host_allowed(host, admin_host):
        return Refusal("host_not_allowed",
                       f"Host {host!r} is not this listener's: without admin_token only an IP "
                       "address, localhost or admin_listen's host is answered (a website's own "
                       "name pointed at this host must not reach it). Use one of those, or set "
                       "admin_token.")
    if (request.method == "POST" or not token_configured) and cross_site(request.headers, host):
        if request.method == "POST":
            return Refusal("cross_site", "Refused: this POST came from another website's "
                                         "page. Nothing was done.")
        return Refusal("cross_site", "Refused: another website's page asked for this. Type "
                                     "the address, or follow the inspector's own links.")
    return None


def host_allowed(host: str | None, admin_host: str) -> bool:
    """``host`` (a ``Host`` header) names this listener by address, ``localhost`` or
    ``admin_host``, with or without a port. No header at all is allowed: every browser sends
    one, so a request without it is not a browser's."""
    if host is None:
        return True
    name, _ = _split_host(host)
    if name is None:
        return False
    if name in ("localhost", admin_host.strip("[]").lower()):
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def cross_site(headers: Mapping[str, str], host: str | None) -> bool:
    """A browser says the request came from another site's page: ``Sec-Fetch-Site`` is
    ``cross-site`` or ``same-site`` (another port or subdomain is another site's page too), or
    ``Origin`` is ``null`` (a sandboxed or file page) or names another host or port than
    ``host``."""
    if headers.get("Sec-Fetch-Site", "").strip().lower() in _OTHER_SITES:
        return True
    origin = headers.get("Origin")
    if origin is None:
        return False
    try:
        parts = urlsplit(origin.strip())
        origin_port = parts.port or _DEFAULT_PORTS.get(parts.scheme.lower())
    except ValueError:
        return True
    if not parts.hostname or host is None:
        return True
    name, port = _split_host(host)
    return (name, port or _DEFAULT_PORTS.get(parts.scheme.lower())) != (
        parts.hostname.rstrip(".").lower(), origin_port)


def _split_host(host: str) -> tuple[str | None, int | None]:
    """A ``Host`` value as (lower-case name without brackets or a final dot, port or None);
    (None, None) when it is not one."""
    try:
        parts = urlsplit("//" + host.strip())
        port = parts.port
    except ValueError:
        return None, None
    if not parts.hostname or parts.username is not None or parts.path:
        return None, None
    return parts.hostname.rstrip(".").lower(), port


def fingerprint(token: str | None) -> str:
    """What log lines name an operator by: the first 12 hex digits of the token's SHA-256
    (tells tokens apart across a rotation, and cannot be turned back into the token), or
    ``loopback`` when no token is configured."""
    if token is None:
        return LOOPBACK
    return hashlib.sha256(token.encode()).hexdigest()[:12]


def client_gone(request: web.Request) -> bool:
    """The client closed its connection (an abandoned page or image request): what it waits
    for need not be done."""
    transport = request.transport
    return transport is None or transport.is_closing()
