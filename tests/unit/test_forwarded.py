"""The trusted-hops rule for forwarding headers (``sidecar.core.forwarded``), as a truth table
and as properties over arbitrary headers; and the ``trusted_proxies`` key that feeds it."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

import jsonschema
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from sidecar.config.loader import parse_config
from sidecar.config.network_kinds import Networks
from sidecar.core.errors import ConfigError
from sidecar.core.forwarded import (
    Network,
    forwarding_headers,
    is_forwarding,
    is_trace_context,
    peer_address,
)
from tests.support import base_config

Headers = tuple[tuple[str, str], ...]

LB = [ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("fd00::/8")]
FORGED: Headers = (
    ("X-Forwarded-For", "6.6.6.6"),
    ("X-Forwarded-Proto", "https"),
    ("X-Forwarded-Host", "bank.example"),
    ("X-Forwarded-Port", "443"),
    ("Forwarded", "for=6.6.6.6;proto=https"),
    ("X-Real-IP", "6.6.6.6"),
)


@dataclass(frozen=True)
class Case:
    rule: str
    headers: Headers
    peer: str | None
    expected: Headers
    scheme: str = "http"
    trusted: tuple[Network, ...] = tuple(LB)


HOST = ("Host", "hooks.example.com")
SIG = ("Stripe-Signature", "t=1,v1=ab")

CASES = [
    # -- an untrusted peer: its forwarding headers are replaced by the proxy's ----------------
    Case("untrusted peer, nothing forwarded: the proxy says who called it",
         (HOST, SIG), "203.0.113.9",
         (HOST, SIG, ("X-Forwarded-For", "203.0.113.9"), ("X-Forwarded-Proto", "http"),
          ("X-Forwarded-Host", "hooks.example.com"))),
    Case("untrusted peer, forged headers: every one dropped, the proxy's set",
         (HOST, *FORGED, SIG), "203.0.113.9",
         (HOST, SIG, ("X-Forwarded-For", "203.0.113.9"), ("X-Forwarded-Proto", "http"),
          ("X-Forwarded-Host", "hooks.example.com"))),
    Case("names match in any case",
         (("x-FORWARDED-for", "6.6.6.6"), ("FORWARDED", "for=x"), ("x-real-ip", "6.6.6.6"),
          ("X-FORWARDED-PREFIX", "/evil")), "203.0.113.9",
         (("X-Forwarded-For", "203.0.113.9"), ("X-Forwarded-Proto", "http"))),
    Case("the listener's scheme, lower-case", (HOST,), "203.0.113.9",
         (HOST, ("X-Forwarded-For", "203.0.113.9"), ("X-Forwarded-Proto", "https"),
          ("X-Forwarded-Host", "hooks.example.com")), scheme="HTTPS"),
    Case("no Host (HTTP/1.0): no X-Forwarded-Host", (SIG,), "203.0.113.9",
         (SIG, ("X-Forwarded-For", "203.0.113.9"), ("X-Forwarded-Proto", "http"))),
    Case("several Host lines: the first", (HOST, ("Host", "other.example")), "203.0.113.9",
         (HOST, ("Host", "other.example"), ("X-Forwarded-For", "203.0.113.9"),
          ("X-Forwarded-Proto", "http"), ("X-Forwarded-Host", "hooks.example.com"))),
    Case("unknown peer (not an IP address): untrusted, no X-Forwarded-For",
         (HOST, *FORGED), None,
         (HOST, ("X-Forwarded-Proto", "http"), ("X-Forwarded-Host", "hooks.example.com"))),
    Case("a peer that is not an IP address is unknown", FORGED, "/run/sidecar.sock",
         (("X-Forwarded-Proto", "http"),)),
    Case("no trusted_proxies: even a private peer is untrusted", FORGED, "10.1.2.3",
         (("X-Forwarded-For", "10.1.2.3"), ("X-Forwarded-Proto", "http")), trusted=()),
    Case("an IPv6 peer, as is", (), "2001:db8::1",
         (("X-Forwarded-For", "2001:db8::1"), ("X-Forwarded-Proto", "http"))),
    Case("an IPv4-mapped peer is its IPv4 address", (), "::ffff:203.0.113.9",
         (("X-Forwarded-For", "203.0.113.9"), ("X-Forwarded-Proto", "http"))),
    Case("an IPv6 zone is left out", (), "fe80::1%eth0",
         (("X-Forwarded-For", "fe80::1"), ("X-Forwarded-Proto", "http"))),

    # -- a trusted peer: it speaks for the hops before it; the proxy appends itself ----------
    Case("trusted peer: appended to its X-Forwarded-For; its proto and host kept",
         (HOST, ("X-Forwarded-For", "198.51.100.7"), ("X-Forwarded-Proto", "https"),
          ("X-Forwarded-Host", "api.example.com"), SIG), "10.1.2.3",
         (HOST, ("X-Forwarded-Proto", "https"), ("X-Forwarded-Host", "api.example.com"), SIG,
          ("X-Forwarded-For", "198.51.100.7, 10.1.2.3"))),
    Case("several trusted hops: the chain as the peer wrote it, the peer last",
         (("X-Forwarded-For", "198.51.100.7, 10.9.9.9"),), "10.1.2.3",
         (("X-Forwarded-For", "198.51.100.7, 10.9.9.9, 10.1.2.3"),
          ("X-Forwarded-Proto", "http"))),
    Case("several X-Forwarded-For lines are one list, joined",
         (("X-Forwarded-For", "198.51.100.7"), SIG, ("x-forwarded-for", " 10.9.9.9 "),
          ("X-Forwarded-For", "")), "10.1.2.3",
         (SIG, ("X-Forwarded-For", "198.51.100.7, 10.9.9.9, 10.1.2.3"),
          ("X-Forwarded-Proto", "http"))),
    Case("trusted peer without forwarding headers: as from any peer",
         (HOST,), "10.1.2.3",
         (HOST, ("X-Forwarded-For", "10.1.2.3"), ("X-Forwarded-Proto", "http"),
          ("X-Forwarded-Host", "hooks.example.com"))),
    Case("trusted peer: its other X-Forwarded-*, X-Real-IP kept as written",
         (("X-Forwarded-Port", "443"), ("X-Forwarded-Prefix", "/hooks"),
          ("X-Real-IP", "198.51.100.7")), "10.1.2.3",
         (("X-Forwarded-Port", "443"), ("X-Forwarded-Prefix", "/hooks"),
          ("X-Real-IP", "198.51.100.7"), ("X-Forwarded-For", "10.1.2.3"),
          ("X-Forwarded-Proto", "http"))),
    Case("trusted peer's Forwarded: its lines joined, this hop appended (RFC 7239 §4)",
         (("Forwarded", "for=198.51.100.7;proto=https"), ("Forwarded", 'for="[2001:db8::7]"')),
         "10.1.2.3",
         (("X-Forwarded-For", "10.1.2.3"), ("X-Forwarded-Proto", "http"),
          ("Forwarded", 'for=198.51.100.7;proto=https, for="[2001:db8::7]", for=10.1.2.3'))),
    Case("an IPv6 hop in Forwarded is quoted, in brackets (RFC 7239 §6)",
         (("Forwarded", "for=198.51.100.7"),), "fd00::5",
         (("X-Forwarded-For", "fd00::5"), ("X-Forwarded-Proto", "http"),
          ("Forwarded", 'for=198.51.100.7, for="[fd00::5]"'))),
    Case("Forwarded is never created", (HOST,), "fd00::5",
         (HOST, ("X-Forwarded-For", "fd00::5"), ("X-Forwarded-Proto", "http"),
          ("X-Forwarded-Host", "hooks.example.com"))),
    Case("an IPv4-mapped peer matches an IPv4 network", (("X-Forwarded-Proto", "https"),),
         "::ffff:10.1.2.3",
         (("X-Forwarded-Proto", "https"), ("X-Forwarded-For", "10.1.2.3"))),
    Case("just outside the trusted network: untrusted", FORGED, "11.0.0.1",
         (("X-Forwarded-For", "11.0.0.1"), ("X-Forwarded-Proto", "http"))),

    # -- spellings a CGI/WSGI server reads as a forwarding header (it joins their values) ----
    Case("untrusted peer: every spelling of a forwarding header is dropped",
         (("X_Forwarded_For", "6.6.6.6"), ("x_forwarded_proto", "gopher"),
          ("X.Real.IP", "6.6.6.7"), ("Forwarded_", "for=6.6.6.6"), SIG), "203.0.113.9",
         (("Forwarded_", "for=6.6.6.6"), SIG, ("X-Forwarded-For", "203.0.113.9"),
          ("X-Forwarded-Proto", "http"))),
    Case("trusted peer: a hop writes dashes; other spellings came from behind it, dropped",
         (("X-Forwarded-For", "198.51.100.7"), ("X_Forwarded_For", "6.6.6.6"),
          ("X-Forwarded-Proto", "https"), ("X_Forwarded_Proto", "gopher"),
          ("x-forwarded-port", "443"), ("X_Forwarded_Port", "1"), ("X_Real_IP", "6.6.6.6"),
          ("Forwarded", "for=198.51.100.7"), ("X.Real.IP", "6.6.6.6"), SIG), "10.1.2.3",
         (("X-Forwarded-Proto", "https"), ("x-forwarded-port", "443"), SIG,
          ("X-Forwarded-For", "198.51.100.7, 10.1.2.3"),
          ("Forwarded", "for=198.51.100.7, for=10.1.2.3"))),
    Case("trusted peer with only an underscore X_Forwarded_Proto: the proxy's is set",
         (("X_Forwarded_Proto", "gopher"), ("X_Forwarded_Host", "bank.example"), HOST),
         "10.1.2.3",
         (HOST, ("X-Forwarded-For", "10.1.2.3"), ("X-Forwarded-Proto", "http"),
          ("X-Forwarded-Host", "hooks.example.com"))),
]


@pytest.mark.parametrize("case", CASES, ids=[c.rule for c in CASES])
def test_rule(case: Case) -> None:
    assert forwarding_headers(case.headers, case.peer, case.scheme, case.trusted) \
        == case.expected


@pytest.mark.parametrize(("name", "forwarding"), [
    ("X-Forwarded-For", True), ("x-forwarded-anything", True), ("Forwarded", True),
    ("X-REAL-IP", True), ("X-Forwarded", False), ("Forwarded-For", False),
    ("X-Real-IP-Extra", False), ("Host", False), ("X-Webhook-Sidecar-Attempt", False),
    ("X_Forwarded_For", True), ("x.real.ip", True), ("X-Forwarded_Host", True),
    ("Forwarded_", False), ("X_Forwarded", False),
])
def test_which_headers_are_forwarding_headers(name: str, forwarding: bool) -> None:
    assert is_forwarding(name) is forwarding


# -- properties over arbitrary headers ---------------------------------------------------------

_FORWARDING_NAMES = ["X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host",
                     "X-Forwarded-Port", "X-Forwarded-Prefix", "X-Forwarded-Ssl", "Forwarded",
                     "X-Real-IP"]
_OTHER_NAMES = ["Host", "Content-Type", "Stripe-Signature", "X-Forwarded", "Forwarded-By",
                "X-Real-IP-Hint", "Idempotency-Key", "User-Agent"]


@st.composite
def _name(draw: st.DrawFn) -> str:
    """A header name in any case: known forwarding or look-alike names, or anything."""
    name = draw(st.one_of(st.sampled_from(_FORWARDING_NAMES + _OTHER_NAMES),
                          st.text(st.sampled_from("abcxXfF-_"), min_size=1, max_size=20)))
    flips = draw(st.lists(st.booleans(), min_size=len(name), max_size=len(name)))
    return "".join(c.swapcase() if flip else c for c, flip in zip(name, flips, strict=True))


_headers = st.lists(st.tuples(_name(), st.text(max_size=40)), max_size=12)
_peers = st.one_of(st.none(), st.ip_addresses().map(str), st.text(max_size=20),
                   st.ip_addresses(v=4, network="10.0.0.0/8").map(lambda a: f"::ffff:{a}"))
TRUSTED = [ipaddress.ip_network("10.0.0.0/8")]


@settings(max_examples=500, deadline=None)
@given(headers=_headers, peer=_peers, scheme=st.sampled_from(["http", "https"]))
def test_no_forwarding_header_from_an_untrusted_peer_survives(
        headers: list[tuple[str, str]], peer: str | None, scheme: str) -> None:
    address = peer_address(peer)
    assume(address is None or address not in TRUSTED[0])
    out = forwarding_headers(headers, peer, scheme, TRUSTED)
    others = [(n, v) for n, v in headers if not is_forwarding(n) and not is_trace_context(n)]
    assert [(n, v) for n, v in out if not is_forwarding(n)] == others
    expected = [] if address is None else [("X-Forwarded-For", str(address))]
    expected.append(("X-Forwarded-Proto", scheme))
    host = next((v.strip() for n, v in headers if n.lower() == "host"), "")
    if host:
        expected.append(("X-Forwarded-Host", host))
    assert [(n, v) for n, v in out if is_forwarding(n)] == expected


@settings(max_examples=300, deadline=None)
@given(headers=_headers, peer=st.ip_addresses(v=4, network="10.0.0.0/8").map(str))
def test_a_trusted_peer_is_appended_to_and_nothing_else_changes(
        headers: list[tuple[str, str]], peer: str) -> None:
    out = forwarding_headers(headers, peer, "http", TRUSTED)
    chains = ("x-forwarded-for", "forwarded")
    # A forwarding header spelt other than with dashes is never a hop's own: dropped.
    kept = [(n, v) for n, v in headers if n.lower() not in chains
            and not (is_forwarding(n) and not re.fullmatch(r"[A-Za-z0-9-]+", n))]
    assert [(n, v) for n, v in out if n.lower() not in chains][:len(kept)] == kept
    sent = [v.strip() for n, v in headers if n.lower() == "x-forwarded-for" and v.strip()]
    assert [v for n, v in out if n.lower() == "x-forwarded-for"] == [", ".join([*sent, peer])]


TRACE: Headers = (("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
                  ("TraceState", "evil=1"), ("baggage", "user=admin"))


def test_trace_context_passes_only_from_a_trusted_hop() -> None:
    untrusted = forwarding_headers((("Host", "h"), *TRACE), "6.6.6.6", "http", TRUSTED)
    assert not [n for n, _ in untrusted if is_trace_context(n)]
    trusted = forwarding_headers((("Host", "h"), *TRACE), "10.1.2.3", "http", TRUSTED)
    assert [(n, v) for n, v in trusted if is_trace_context(n)] == list(TRACE)


@given(peer=st.text(max_size=60))
def test_any_peer_text_is_an_address_or_unknown(peer: str) -> None:
    address = peer_address(peer)
    assert address is None or isinstance(address, ipaddress.IPv4Address | ipaddress.IPv6Address)


# -- the trusted_proxies key -------------------------------------------------------------------

def test_trusted_proxies_default_to_none() -> None:
    config = parse_config(base_config("http://127.0.0.1:9", "sqlite:///x.db"), env={})
    assert config.trusted_proxies == ()


def test_trusted_proxies_read_ipv4_ipv6_and_single_addresses() -> None:
    data = base_config("http://127.0.0.1:9", "sqlite:///x.db",
                       trusted_proxies=["10.0.0.0/8", "fd00::/8", "192.0.2.1", "${NET}"])
    config = parse_config(data, env={"NET": "::1"})
    assert config.trusted_proxies == tuple(ipaddress.ip_network(n) for n in [
        "10.0.0.0/8", "fd00::/8", "192.0.2.1/32", "::1/128"])


@pytest.mark.parametrize(("value", "path", "message"), [
    ("10.0.0.0/8", "trusted_proxies", "must be a list of CIDRs"),
    (["10.0.0.0/8", "10.0.0.300/8"], "trusted_proxies[1]", "'10.0.0.300/8' is not a CIDR"),
    (["10.0.0.1/8"], "trusted_proxies[0]",
     "10.0.0.1/8 has host bits set: write 10.0.0.0/8 for the network, or 10.0.0.1/32 for one "
     "address"),
    (["fd00::1/8"], "trusted_proxies[0]", "write fd00::/8 for the network"),
    (["10.0.0.0/255.0.0.0"], "trusted_proxies[0]", "is not a CIDR"),
    (["10.0.0.0/08"], "trusted_proxies[0]", "is not a CIDR"),
    (["fe80::%eth0/64"], "trusted_proxies[0]", "is not a CIDR"),
    ([" 10.0.0.0/8"], "trusted_proxies[0]", "is not a CIDR"),
    (["1.2.3.4/33"], "trusted_proxies[0]", "is not a CIDR"),
    ([8], "trusted_proxies[0]", "8 is not a CIDR"),
    (["::ffff:10.0.0.0/104"], "trusted_proxies[0]", "is IPv4-mapped: write it as IPv4"),
])
def test_a_bad_cidr_is_an_error_naming_its_key_path(value: object, path: str,
                                                     message: str) -> None:
    data = base_config("http://127.0.0.1:9", "sqlite:///x.db", trusted_proxies=value)
    with pytest.raises(ConfigError) as raised:
        parse_config(data, env={})
    assert raised.value.path == path and message in raised.value.message


_SCHEMA = jsonschema.Draft202012Validator(
    {"$defs": {"interpolated": {"type": "string", "pattern": r"\$\{"}}, **Networks().schema()})


@settings(max_examples=1000, deadline=None)
@given(st.one_of(
    st.text(st.sampled_from("0123456789abcdefABCDEF:./% "), max_size=45),
    st.tuples(st.ip_addresses(), st.integers(0, 130)).map(lambda t: f"{t[0]}/{t[1]}"),
    st.tuples(st.ip_addresses(), st.integers(0, 128)).map(
        lambda t: str(ipaddress.ip_network(f"{t[0]}/{min(t[1], t[0].max_prefixlen)}",
                                           strict=False))),
))
def test_the_schema_accepts_every_cidr_the_loader_accepts(raw: str) -> None:
    """Whatever the schema rejects, the loader rejects (it is stricter only as its docs say)."""
    try:
        Networks().parse([raw], "trusted_proxies")
    except ConfigError:
        return
    assert _SCHEMA.is_valid([raw]), raw
