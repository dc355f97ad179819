"""What a configuration value may be. A kind holds the three views of one value type: its label
in the reference tables, its JSON Schema, and how the loader reads it (``parse``: the YAML value
to the model's value, or a ``ConfigError`` naming the key path). Keys are declared with a kind on
the model field they fill (``sidecar.config.model``, see ``sidecar.config.declarations``); mypy
checks that the kind's value (``parse``'s return type) fits the field.

The schemas name shared value types by ``$ref`` (``duration``, ``size``…), defined in
``sidecar.config.schema.values``. Every string value may hold ``${VAR}``: the loader interpolates
before it parses, so a constrained string also accepts an ``interpolated`` one (``text``).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from sidecar.config.problems import did_you_mean
from sidecar.core.durations import parse_duration
from sidecar.core.errors import ConfigError
from sidecar.core.forwarded import Network

JSON = dict[str, Any]
T_co = TypeVar("T_co", covariant=True)
E = TypeVar("E", bound=StrEnum)


def ref(name: str) -> JSON:
    return {"$ref": f"#/$defs/{name}"}


def text(schema: JSON) -> JSON:
    """A constrained string that may instead hold a ``${VAR}`` reference."""
    return {"anyOf": [schema, ref("interpolated")]}


def choice(values: list[str]) -> JSON:
    return text({"enum": values})


@dataclass(frozen=True, slots=True)
class Address:
    """A ``HOST:PORT`` value (``HostPort``)."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


class Kind(Protocol[T_co]):
    """A value type."""

    @property
    def label(self) -> str:
        """The type column of the reference tables."""

    def schema(self) -> JSON:
        """The JSON Schema of a value."""

    def parse(self, raw: object, path: str) -> T_co:
        """The model's value for ``raw``, or a ``ConfigError`` naming ``path``."""


class _Shared:
    """A kind whose JSON Schema is the shared ``$defs`` entry named ``defs``."""

    defs: ClassVar[str]

    def schema(self) -> JSON:
        return ref(self.defs)


@dataclass(frozen=True)
class Duration:
    """``500ms``, ``10s``, ``5m``, ``2h``, ``3d`` or a number of seconds, in seconds."""

    positive: bool = False

    @property
    def label(self) -> str:
        return "duration > 0" if self.positive else "duration"

    def schema(self) -> JSON:
        return ref("positive_duration" if self.positive else "duration")

    def parse(self, raw: object, path: str) -> float:
        seconds = parse_duration(raw, path)
        if self.positive and seconds <= 0:
            raise ConfigError(path, "must be positive")
        return seconds


# ASCII digits only: \d and str.isdigit() also accept other scripts' digits.
_SIZE_RE = re.compile(r"^\s*([0-9]+)\s*(B|KB|KiB|MB|MiB|GB|GiB)?\s*$")
_SIZE_UNITS = {
    None: 1, "B": 1, "KB": 1000, "KiB": 1024, "MB": 1000**2, "MiB": 1024**2,
    "GB": 1000**3, "GiB": 1024**3,
}


@dataclass(frozen=True)
class Size(_Shared):
    """Bytes, or ``512KiB``, ``1MiB``, ``1MB``…; more than zero."""

    label = "size"
    defs = "size"
    zero_allowed: ClassVar[bool] = False

    def parse(self, raw: object, path: str) -> int:
        if isinstance(raw, bool):
            raise ConfigError(path, "must be a size in bytes, e.g. 1048576 or 1MiB")
        if isinstance(raw, int):
            value = raw
        elif isinstance(raw, str) and (match := _SIZE_RE.match(raw)):
            value = int(match.group(1)) * _SIZE_UNITS[match.group(2)]
        else:
            raise ConfigError(path, "must be a size in bytes, e.g. 1048576 or 1MiB")
        if value <= 0 and not (value == 0 and self.zero_allowed):
            raise ConfigError(path, "must be positive")
        return value


class SizeOrZero(Size):
    """A ``Size`` where 0 means "off"."""

    defs = "size_or_zero"
    zero_allowed = True


@dataclass(frozen=True)
class Integer:
    minimum: int

    @property
    def label(self) -> str:
        return f"integer ≥ {self.minimum}"

    def schema(self) -> JSON:
        return {"type": "integer", "minimum": self.minimum}

    def parse(self, raw: object, path: str) -> int:
        if isinstance(raw, bool) or not isinstance(raw, int) or raw < self.minimum:
            raise ConfigError(path, f"must be an integer ≥ {self.minimum}")
        return raw


@dataclass(frozen=True)
class Boolean:
    label = "boolean"

    def schema(self) -> JSON:
        return {"type": "boolean"}

    def parse(self, raw: object, path: str) -> bool:
        if not isinstance(raw, bool):
            raise ConfigError(path, "must be true or false")
        return raw


@dataclass(frozen=True)
class Choice(Generic[E]):
    """One of an enum's values, in the enum's order; read as the enum member."""

    enum: type[E]

    @property
    def values(self) -> list[str]:
        return [member.value for member in self.enum]

    @property
    def label(self) -> str:
        return " | ".join(self.values)

    def schema(self) -> JSON:
        return choice(self.values)

    def parse(self, raw: object, path: str) -> E:
        if raw not in self.values:  # a list, not a set: ``raw`` may be unhashable
            suggestion = did_you_mean(raw, self.values) if isinstance(raw, str) else None
            hint = f"; did you mean {suggestion}?" if suggestion else ""
            raise ConfigError(path, f"must be one of {', '.join(self.values)}{hint}")
        return self.enum(raw)


@dataclass(frozen=True)
class String:
    """A string that ``accept`` allows (any, by default), else ``message``."""

    label: str
    json: JSON
    message: str = "must be a string"
    accept: Callable[[str], bool] | None = None

    def schema(self) -> JSON:
        return self.json

    def parse(self, raw: object, path: str) -> str:
        if not isinstance(raw, str) or (self.accept is not None and not self.accept(raw)):
            raise ConfigError(path, self.message)
        return raw


_PORT_RE = re.compile(r"^[0-9]{1,5}$")


@dataclass(frozen=True)
class HostPort(_Shared):
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


def url_scheme(url: str) -> str:
    scheme, sep, _ = url.partition("://")
    return scheme.lower() if sep else ""


@dataclass(frozen=True)
class UpstreamURL(_Shared):
    """The app: http(s)://host…, without a trailing slash."""

    label = "URL"
    defs = "upstream_url"

    def parse(self, raw: object, path: str) -> str:
        if (not isinstance(raw, str) or url_scheme(raw) not in ("http", "https")
                or not raw.partition("://")[2].split("/", 1)[0]):
            raise ConfigError(path, "must be an http:// or https:// URL of the app, with a host")
        return raw.rstrip("/")


@dataclass(frozen=True)
class StoreURL(_Shared):
    """``sqlite:///PATH`` or ``postgresql://…`` (a relative PATH is resolved by the loader)."""

    label = "URL"
    defs = "store_url"

    def parse(self, raw: object, path: str) -> str:
        if not isinstance(raw, str):
            raise ConfigError(path, "must be a string")
        if not (raw.startswith("sqlite:///") and len(raw) > len("sqlite:///")) and url_scheme(
                raw) not in ("postgresql", "postgres"):
            raise ConfigError(path, "must be sqlite:///PATH or postgresql://…")
        return raw


_STATUS_CLASS = re.compile(r"[1-5]xx")


@dataclass(frozen=True)
class Statuses(_Shared):
    """HTTP statuses and classes (``5xx``), never a 2xx."""

    label = "list"
    defs = "statuses"

    def parse(self, raw: object, path: str) -> frozenset[int]:
        if not isinstance(raw, list):
            raise ConfigError(path, "must be a list of statuses (e.g. 429) or classes "
                              "(e.g. '5xx')")
        statuses: set[int] = set()
        for i, item in enumerate(raw):
            if isinstance(item, int) and not isinstance(item, bool) and 100 <= item <= 599:
                statuses.add(item)
            elif isinstance(item, str) and _STATUS_CLASS.fullmatch(item):
                start = int(item[0]) * 100
                statuses.update(range(start, start + 100))
            else:
                raise ConfigError(f"{path}[{i}]", "must be a status 100–599 or a class like "
                                  "'5xx'")
        if any(200 <= s < 300 for s in statuses):
            raise ConfigError(path, "2xx answers always end an event done: list only others")
        return frozenset(statuses)


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


@dataclass(frozen=True)
class Custom:
    """A value the loader reads itself, with context a kind does not have (the signature
    scheme, the preset, the environment): ``parse`` passes the YAML value through, and the
    loader's step for the key turns it into the field's value."""

    label: str
    json: JSON

    def schema(self) -> JSON:
        return self.json

    def parse(self, raw: object, path: str) -> Any:
        return raw


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask; not a cgroup CPU quota)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclass(frozen=True)
class ProcessCount:
    """An integer ≥ 1, or ``auto``: one per CPU available to the process (``available_cpus``)."""

    label = "integer ≥ 1 | auto"
    count_auto: Callable[[], int] = available_cpus

    def schema(self) -> JSON:
        return {"anyOf": [{"type": "integer", "minimum": 1}, {"const": "auto"},
                          ref("interpolated")]}

    def parse(self, raw: object, path: str) -> int:
        if raw == "auto":
            return max(1, self.count_auto())
        if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
            raise ConfigError(path, "must be an integer ≥ 1, or auto (one per CPU available)")
        return raw
