"""Delivery rates in configuration: ``20/s``, ``600/m``, ``1000/h``, ``50000/d``."""

from __future__ import annotations

import re
from dataclasses import dataclass

from sidecar.core.errors import ConfigError

_PER = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
# ASCII digits only: Python's \d also accepts other scripts' digits.
_RATE = re.compile(r"([0-9]+)\s*/\s*(s|m|h|d)")
_HINT = "must be a rate such as 20/s, 600/m, 1000/h or 50000/d (a count > 0 per unit)"


@dataclass(frozen=True, slots=True)
class Rate:
    """``count`` events per ``per`` seconds."""

    count: int
    per: float

    @property
    def per_second(self) -> float:
        return self.count / self.per

    def __str__(self) -> str:
        unit = next(name for name, seconds in _PER.items() if seconds == self.per)
        return f"{self.count}/{unit}"


def parse_rate(value: object, path: str) -> Rate:
    """The rate ``value`` states; a ``ConfigError`` naming ``path`` otherwise."""
    if not isinstance(value, str) or (match := _RATE.fullmatch(value.strip())) is None:
        raise ConfigError(path, f"{_HINT}, got {value!r}")
    count = int(match[1])
    if count <= 0:
        raise ConfigError(path, f"{_HINT}, got {value!r}")
    return Rate(count, _PER[match[2]])
