"""Kinds of network values: a ``HOST:PORT`` to listen on, the app's and the store's URLs, and
the CIDR networks of trusted proxies (see ``kinds.py`` for what a kind is)."""

from __future__ import annotations

import contextlib
import ipaddress
import re
from dataclasses import dataclass
from typing import Final

from sidecar.config.kinds import JSON, SharedDef, text
from sidecar.config.mysql_url import SCHEMES, parse_url
from sidecar.core.errors import ConfigError
from sidecar.core.forwarded import Network


@dataclass(frozen=True, slots=True)
class Address:
    """A ``HOST:PORT`` value (``HostPort``)."""

    host: str
    port: int

    def __str__(self) -> str:
        # An IPv6 host in brackets, as HostPort reads it and as a URL needs it.
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


_PORT_RE = re.compile(r"^[0-9]{1,5}$")


@dataclass(frozen=True)
class HostPort(SharedDef):
    label = "HOST:PORT"
    defs = "address"

    def parse(self, raw: object, path: str) -> Address:
        if not isinstance(raw, str) or ":" not in raw:
            raise ConfigError(path, "must be HOST:PORT, e.g. 0.0.0.0:8080")
        host, _, port_text = raw.rpartition(":")
        host = host.strip("[]")
        if not host or not _PORT_RE.match(port_text) or not 0 <= int(port_text) <= 65535:
            raise ConfigError(path, f"{raw!r} is not HOST:PORT with a port from 0 to 65535")
        return Address(host, int(port_text))


HTTP_URL_PATTERN: Final = r"^[Hh][Tt][Tt][Pp][Ss]?://[^/?#\s]+"


def url_scheme(url: str) -> str:
    scheme, sep, _ = url.partition("://")
    return scheme.lower() if sep else ""


def http_url(raw: object, path: str, problem: str) -> str:
    """``raw`` if it is an http(s) URL with a host; a ``ConfigError`` saying ``problem``
    otherwise."""
    if (not isinstance(raw, str) or url_scheme(raw) not in ("http", "https")
            or not raw.partition("://")[2].split("/", 1)[0]):
        raise ConfigError(path, problem)
    return raw


@dataclass(frozen=True)
class UpstreamURL(SharedDef):
    """The app: http(s)://host…, without a trailing slash."""

    label = "URL"
    defs = "upstream_url"

    def parse(self, raw: object, path: str) -> str:
        return http_url(
            raw, path, "must be an http:// or https:// URL of the app, with a host").rstrip("/")


@dataclass(frozen=True)
class TracingURL:
    """An OTLP/HTTP collector: http(s)://host…, without a trailing slash."""

    label = "URL"

    def schema(self) -> JSON:
        return text({"type": "string", "pattern": HTTP_URL_PATTERN})

    def parse(self, raw: object, path: str) -> str:
        return http_url(
            raw, path, "must be an http:// or https:// URL of the collector").rstrip("/")


@dataclass(frozen=True)
class StoreURL(SharedDef):
    """``sqlite:///PATH``, ``postgresql://…``, ``mysql://…`` or ``mariadb://…`` (a relative PATH
    is resolved by the loader)."""

    label = "URL"
    defs = "store_url"

    def parse(self, raw: object, path: str) -> str:
        if not isinstance(raw, str):
            raise ConfigError(path, "must be a string")
        scheme = url_scheme(raw)
        if scheme in SCHEMES:
            try:
                parse_url(raw)
            except ValueError as exc:
                raise ConfigError(path, str(exc)) from None
            return raw
        if not (raw.startswith("sqlite:///") and len(raw) > len("sqlite:///")) and scheme not in (
                "postgresql", "postgres"):
            raise ConfigError(path, "must be sqlite:///PATH, postgresql://…, mysql://… or "
                              "mariadb://…")
        return raw


# What the loader hands to ``ipaddress`` (no netmask forms, zones or spaces, which it would also
# read), and the schema's view of it: IPv4 exactly, IPv6 by its characters (the loader checks
# the rest, that the host bits are zero and that an IPv6 network is not IPv4-mapped).
_CIDR_RE = re.compile(r"[0-9A-Fa-f:.]+(?:/(?:0|[1-9][0-9]*))?")
_IPV4_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")
_IPV4_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_CIDR_PATTERN = (rf"^(?:(?:{_IPV4_OCTET}\.){{3}}{_IPV4_OCTET}(?:/(?:3[0-2]|[12]?[0-9]))?"
                 r"|[0-9A-Fa-f.]*:[0-9A-Fa-f:.]*(?:/(?:12[0-8]|1[01][0-9]|[1-9]?[0-9]))?)$")


@dataclass(frozen=True)
class Networks:
    """IPv4 and IPv6 networks in CIDR notation (``10.0.0.0/8``, ``fd00::/8``; an address alone
    is that one address), host bits zero; a list, possibly empty."""

    label = "list of CIDRs"

    def schema(self) -> JSON:
        return {"type": "array", "items": text({
            "description": "An IPv4 or IPv6 network in CIDR notation, e.g. 10.0.0.0/8 or "
            "fd00::/8; an address alone is that one address.",
            "type": "string", "pattern": _CIDR_PATTERN})}

    def parse(self, raw: object, path: str) -> tuple[Network, ...]:
        if not isinstance(raw, list):
            raise ConfigError(path, "must be a list of CIDRs, e.g. [10.0.0.0/8, \"fd00::/8\"]")
        return tuple(self._network(item, f"{path}[{i}]") for i, item in enumerate(raw))

    @staticmethod
    def _network(raw: object, path: str) -> Network:
        network: Network | None = None
        if isinstance(raw, str) and _CIDR_RE.fullmatch(raw):
            with contextlib.suppress(ValueError):
                network = ipaddress.ip_network(raw, strict=False)
        if not isinstance(raw, str) or network is None:
            raise ConfigError(path, f"{raw!r} is not a CIDR: an IPv4 or IPv6 network such as "
                              "10.0.0.0/8 or fd00::/8, or one address")
        address = raw.partition("/")[0]
        if ipaddress.ip_address(address) != network.network_address:
            raise ConfigError(path, f"{raw} has host bits set: write {network} for the network, "
                              f"or {address}/{network.max_prefixlen} for one address")
        if isinstance(network, ipaddress.IPv6Network) and network.subnet_of(_IPV4_MAPPED):
            raise ConfigError(path, f"{raw} is IPv4-mapped: write it as IPv4 (a mapped peer "
                              "is matched as its IPv4 address)")
        return network
