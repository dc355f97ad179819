"""``${VAR}`` / ``${VAR:-default}`` interpolation of string values from the environment."""

from __future__ import annotations

import re
from collections.abc import Mapping

from sidecar.core.errors import ConfigError

_PATTERN = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$\$")


def interpolate(value: object, env: Mapping[str, str], path: str = "") -> object:
    """Return ``value`` with every string interpolated, recursively. ``$$`` is a literal ``$``.

    An unset variable without a default is an error naming both the key path and the variable,
    so a missing secret fails at start-up instead of producing an empty key.
    """
    if isinstance(value, str):
        return _interpolate_str(value, env, path)
    if isinstance(value, list):
        return [interpolate(item, env, f"{path}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, dict):
        return {
            key: interpolate(item, env, f"{path}.{key}" if path else str(key))
            for key, item in value.items()
        }
    return value


def references(text: str) -> list[tuple[str, str | None]]:
    """The variables ``text`` refers to, in order: (name, default or None)."""
    return [(m.group(1), m.group(2)) for m in _PATTERN.finditer(text) if m.group(1)]


def _interpolate_str(text: str, env: Mapping[str, str], path: str) -> str:
    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, default = match.group(1), match.group(2)
        value = env.get(name)
        if default is not None and not value:  # as in the shell: unset or empty
            return default
        if value is not None:
            return value
        raise ConfigError(path, f"environment variable {name} is not set "
                          f"(write ${{{name}:-default}} to give a default)")

    return _PATTERN.sub(replace, text)
