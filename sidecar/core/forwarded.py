"""Forwarding headers by a trusted-hops rule: what the app is told about the hop before it.

The app sees the proxy as its client, so the proxy says who called it. A peer may only add to
what the app is told when its address is in ``trusted_proxies`` (a load balancer or ingress in
front of the proxy); anything else could be a forger, and its forwarding headers are replaced.
One pure function of the headers as received, the TCP peer, the listener's scheme and the
trusted networks; the pipeline applies it to the headers it forwards and stores for re-drive,
never to the headers a signature is verified on.

Forwarding headers are ``X-Forwarded-*`` (any suffix), ``Forwarded`` and ``X-Real-IP``, in any
spelling a CGI or WSGI server reads as one of them (``X_Forwarded_For``: see
``core.headers.cgi_name``; the server would join its value with the real header's).

=========================  ================================  ==================================
header                     from an untrusted peer            from a trusted peer
=========================  ================================  ==================================
``X-Forwarded-For``        the peer                          the peer's list, then the peer
``X-Forwarded-Proto``      the listener's scheme             the peer's; if none, the scheme
``X-Forwarded-Host``       the ``Host`` received (none       the peer's; if none, the ``Host``
                           without one)                      received (none without one)
other ``X-Forwarded-*``    dropped                           the peer's
``Forwarded``              dropped                           the peer's, then ``for=<peer>``
``X-Real-IP``              dropped                           the peer's
``X_Forwarded_For`` and    dropped                           dropped
other such spellings
``traceparent``,           dropped                           the peer's
``tracestate``, ``baggage``
any other header           as received, in order             as received, in order
=========================  ================================  ==================================

Precisely:

- Only the TCP peer is checked. Addresses inside ``X-Forwarded-For`` or ``Forwarded`` never
  make a peer trusted or untrusted: they are worth what the hop that wrote them is worth. With
  several trusted hops (client → CDN → load balancer → proxy), each appended the address it saw,
  and the app reads the client from the right of ``X-Forwarded-For``, skipping the addresses of
  its own hops (those in ``trusted_proxies``, and a CDN's ranges in front of them). The proxy
  does not pick "the client" itself, and never sets ``X-Real-IP``.
- A peer that is not an IP address (none known) is untrusted, and no ``X-Forwarded-For`` is set.
  An IPv4-mapped IPv6 peer (``::ffff:10.0.0.1``, on a dual-stack listener) is its IPv4
  address, for matching and in the headers; an IPv6 zone (``%eth0``) is left out.
- A trusted peer's several ``X-Forwarded-For`` lines are one list (RFC 9110 §5.3): they are
  joined with ``, `` into one line, the peer last. So are its ``Forwarded`` lines; the proxy's
  own hop is then one more element, ``for=<peer>`` (RFC 7239 §4; an IPv6 peer quoted and in
  brackets, §6). ``Forwarded`` is extended only when the trusted peer sent one, never created,
  so an app that prefers it over ``X-Forwarded-*`` never loses the peer's chain; its elements
  are passed as the peer wrote them.
- ``X-Forwarded-Host`` is the ``Host`` header as received (the first, if several); the app
  itself gets the upstream's ``Host``. Without a ``Host`` (HTTP/1.0) none is set.
- A trusted peer's forwarding headers are kept only as hops write them, in letters, digits
  and dashes: another spelling (``X_Forwarded_For``) came from a client behind the peer, and
  is dropped from any peer.
- Trace context (W3C ``traceparent``/``tracestate``, ``baggage``) says which trace the
  request belongs to: providers send none, and from anyone else it would graft the app's spans
  onto a trace of the sender's choosing (and ``baggage`` can carry what the app trusts). Only a
  trusted hop's is passed on, as the proxy's own tracing honours only a trusted parent.
- Headers the proxy sets come after the ones it keeps; the names of kept headers are not
  changed.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from typing import Final, TypeAlias

from sidecar.core.headers import cgi_name, is_plain

Network: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network
Address: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address

FORWARDED_FOR: Final = "X-Forwarded-For"
FORWARDED_PROTO: Final = "X-Forwarded-Proto"
FORWARDED_HOST: Final = "X-Forwarded-Host"
FORWARDED: Final = "Forwarded"  # RFC 7239
REAL_IP: Final = "X-Real-IP"

TRACE_CONTEXT: Final = frozenset({"traceparent", "tracestate", "baggage"})

_X_FORWARDED_CGI_PREFIX: Final = cgi_name("X-Forwarded-")
_OTHERS_CGI: Final = (cgi_name(FORWARDED), cgi_name(REAL_IP))


def is_forwarding(name: str) -> bool:
    """``X-Forwarded-*``, ``Forwarded`` or ``X-Real-IP``, in any case, also spelt with
    underscores (``X_Forwarded_For``): CGI/WSGI servers map both spellings to one variable."""
    cgi = cgi_name(name)
    return cgi.startswith(_X_FORWARDED_CGI_PREFIX) or cgi in _OTHERS_CGI


def is_trace_context(name: str) -> bool:
    """W3C Trace Context (``traceparent``, ``tracestate``) or ``baggage``, in any case."""
    return name.lower() in TRACE_CONTEXT


def misspelt_forwarding(name: str) -> bool:
    """A forwarding header spelt otherwise than the hops in front of the proxy spell it
    (``X_Forwarded_For``): a CGI/WSGI app would join it with the real one."""
    return is_forwarding(name) and not is_plain(name)


def peer_address(peer: str | None) -> Address | None:
    """The TCP peer as an address (an IPv4-mapped IPv6 one as IPv4, without an IPv6 zone);
    None when unknown or not an IP address."""
    if not peer:
        return None
    try:
        address = ipaddress.ip_address(peer.partition("%")[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def is_trusted(address: Address, trusted: Sequence[Network]) -> bool:
    return any(address in network for network in trusted)


def forwarding_headers(headers: Iterable[tuple[str, str]], peer: str | None, scheme: str,
                       trusted: Sequence[Network]) -> tuple[tuple[str, str], ...]:
    """The request's headers as the app receives them, by the rule in the module's docstring:
    ``headers`` as received (name, value pairs in order), ``peer`` the TCP peer's address,
    ``scheme`` the listener's (``http``/``https``), ``trusted`` the ``trusted_proxies``."""
    pairs = list(headers)
    address = peer_address(peer)
    if address is not None and is_trusted(address, trusted):
        return _from_trusted(pairs, address, scheme)
    kept = [(n, v) for n, v in pairs if not is_forwarding(n) and not is_trace_context(n)]
    if address is not None:
        kept.append((FORWARDED_FOR, str(address)))
    kept.append((FORWARDED_PROTO, scheme.lower()))
    host = _first(pairs, "host")
    if host is not None:
        kept.append((FORWARDED_HOST, host))
    return tuple(kept)


def _from_trusted(pairs: list[tuple[str, str]], address: Address,
                  scheme: str) -> tuple[tuple[str, str], ...]:
    chains = {FORWARDED_FOR.lower(): FORWARDED_FOR, FORWARDED.lower(): FORWARDED}
    kept = [(n, v) for n, v in pairs
            if n.lower() not in chains and not misspelt_forwarding(n)]
    names = {n.lower() for n, _ in kept}
    for_chain = [*_elements(pairs, FORWARDED_FOR), str(address)]
    kept.append((FORWARDED_FOR, ", ".join(for_chain)))
    if FORWARDED_PROTO.lower() not in names:
        kept.append((FORWARDED_PROTO, scheme.lower()))
    host = _first(pairs, "host")
    if FORWARDED_HOST.lower() not in names and host is not None:
        kept.append((FORWARDED_HOST, host))
    forwarded = _elements(pairs, FORWARDED)
    if forwarded:
        kept.append((FORWARDED, ", ".join([*forwarded, f"for={_node(address)}"])))
    return tuple(kept)


def _elements(pairs: list[tuple[str, str]], name: str) -> list[str]:
    """The values of every ``name`` line, one list (empty lines add nothing)."""
    lower = name.lower()
    return [v.strip() for n, v in pairs if n.lower() == lower and v.strip()]


def _first(pairs: list[tuple[str, str]], name: str) -> str | None:
    value = next((v.strip() for n, v in pairs if n.lower() == name), None)
    return value or None


def _node(address: Address) -> str:
    """A ``Forwarded`` node (RFC 7239 §6): an IPv6 address is quoted, in brackets."""
    if isinstance(address, ipaddress.IPv6Address):
        return f'"[{address}]"'
    return str(address)
