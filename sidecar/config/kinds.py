"""What a configuration value may be. A kind holds the three views of one value type: its label
in the reference tables, its JSON Schema, and how the loader reads it (``parse``: the YAML value
to the model's value, or a ``ConfigError`` naming the key path). Keys are declared with a kind on
the model field they fill (``sidecar.config.model``, see ``sidecar.config.declarations``); mypy
checks that the kind's value (``parse``'s return type) fits the field.

Kinds of network values (addresses, URLs, CIDR networks) are in ``network_kinds.py``.

The schemas name shared value types by ``$ref`` (``duration``, ``size``…), defined in
``sidecar.config.schema.values``. Every string value may hold ``${VAR}``: the loader interpolates
before it parses, so a constrained string also accepts an ``interpolated`` one (``text``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from sidecar.config.problems import did_you_mean
from sidecar.core.durations import parse_duration
from sidecar.core.errors import ConfigError
from sidecar.core.rates import Rate, parse_rate

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


class Kind(Protocol[T_co]):
    """A value type."""

    @property
    def label(self) -> str:
        """The type column of the reference tables."""

    def schema(self) -> JSON:
        """The JSON Schema of a value."""

    def parse(self, raw: object, path: str) -> T_co:
        """The model's value for ``raw``, or a ``ConfigError`` naming ``path``."""


class SharedDef:
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
class Size(SharedDef):
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
class RateKind:
    """``20/s``, ``600/m``, ``1000/h`` or ``50000/d``: a count per unit of time."""

    label = "rate"

    def schema(self) -> JSON:
        return text({"type": "string", "pattern": "^\\s*[0-9]*[1-9][0-9]*\\s*/\\s*[smhd]\\s*$"})

    def parse(self, raw: object, path: str) -> Rate:
        return parse_rate(raw, path)


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


@dataclass(frozen=True)
class Ratio:
    """A number from 0 to 1."""

    label = "number 0–1"

    def schema(self) -> JSON:
        return {"type": "number", "minimum": 0, "maximum": 1}

    def parse(self, raw: object, path: str) -> float:
        if isinstance(raw, bool) or not isinstance(raw, int | float) or not 0 <= raw <= 1:
            raise ConfigError(path, "must be a number from 0 to 1")
        return float(raw)


@dataclass(frozen=True)
class StringMap:
    """A mapping of names to strings, read as its pairs in the order written."""

    label = "mapping"

    def schema(self) -> JSON:
        return {"type": "object", "additionalProperties": {"type": "string"}}

    def parse(self, raw: object, path: str) -> tuple[tuple[str, str], ...]:
        if not isinstance(raw, dict):
            raise ConfigError(path, "must be a mapping of names to strings")
        for name, value in raw.items():
            if not isinstance(value, str):
                raise ConfigError(f"{path}.{name}", "must be a string")
        return tuple((str(name), value) for name, value in raw.items())


_STATUS_CLASS = re.compile(r"[1-5]xx")


@dataclass(frozen=True)
class Statuses(SharedDef):
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
