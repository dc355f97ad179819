"""Durations in configuration: ``500ms``, ``10s``, ``5m``, ``2h``, ``3d`` or plain seconds."""

from __future__ import annotations

import math
import re

from sidecar.core.errors import ConfigError

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
# ASCII digits only: Python's \d and float() also accept other scripts' digits.
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*(ms|s|m|h|d)?")
_HINT = "must be a duration such as 500ms, 10s, 5m, 2h, 3d or a number of seconds"


def parse_duration(value: object, path: str) -> float:
    """Return ``value`` in seconds (finite, >= 0); raise ``ConfigError`` naming ``path``."""
    # bool is an int subclass; `true` in YAML is never meant as one second.
    if isinstance(value, bool):
        raise ConfigError(path, _HINT)
    if isinstance(value, int | float):
        try:
            seconds = float(value)
        except OverflowError:  # a huge YAML integer
            raise ConfigError(path, _HINT) from None
    elif isinstance(value, str):
        match = _DURATION.fullmatch(value.strip())
        if match is None:
            raise ConfigError(path, f"{_HINT}, got {value!r}")
        seconds = float(match[1]) * _UNITS[match[2] or "s"]
    else:
        raise ConfigError(path, _HINT)
    if not math.isfinite(seconds) or seconds < 0:
        raise ConfigError(path, f"{_HINT} (finite and not negative)")
    return seconds


def format_duration(seconds: float) -> str:
    """The largest unit that states ``seconds`` exactly (``30d``, ``90m``, ``2.5s``, ``500ms``),
    in the syntax ``parse_duration`` reads."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    if 0 < seconds < 1 and (seconds * 1000).is_integer():
        return f"{int(seconds * 1000)}ms"
    return f"{seconds:g}s"
