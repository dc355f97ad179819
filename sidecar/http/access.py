"""Who may use the admin listener's operator side (the JSON admin API and the inspector): the
admin token when one is configured, else a loopback peer only. Shared so both read alike."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from typing import Literal

from aiohttp import web

LOOPBACK = "loopback"  # the fingerprint logged for an operator served without a token


def presents(authorization: str, token: str) -> Literal["bearer", "bare"] | None:
    """How an ``Authorization`` value carries the admin token: ``bearer`` (the scheme in any
    case, then one or more spaces: RFC 9110 §11.1), ``bare`` (the token alone, which earlier
    versions accepted too: kept so deployments sending it keep working, but deprecated), or
    None (it does not)."""
    scheme, _, credentials = authorization.partition(" ")
    if scheme.lower() == "bearer" and same(credentials.lstrip(" "), token):
        return "bearer"
    return "bare" if same(authorization, token) else None


def same(given: str, token: str) -> bool:
    """Constant-time equality of a presented value and the token."""
    # Header values are decoded with surrogateescape: encode them back the same way.
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), token.encode())


def from_loopback(request: web.Request) -> bool:
    """The peer is this host (a loopback address, an IPv4-mapped one, or a Unix socket)."""
    peer = request.transport.get_extra_info("peername") if request.transport else None
    if not peer:
        return False
    try:
        address = ipaddress.ip_address(peer[0])
    except ValueError:  # a Unix socket path: local by definition
        return isinstance(peer, str)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def fingerprint(token: str | None) -> str:
    """What log lines name an operator by: the first 12 hex digits of the token's SHA-256
    (tells tokens apart across a rotation, and cannot be turned back into the token), or
    ``loopback`` when no token is configured."""
    if token is None:
        return LOOPBACK
    return hashlib.sha256(token.encode()).hexdigest()[:12]
