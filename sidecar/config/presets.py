"""Provider presets: YAML data shipped in ``sidecar/presets/``, in the schema a user writes.

A user's provider block is deep-merged over the preset by the config loader
(``sidecar.config.providers``); this module only finds and reads the files.
"""

from __future__ import annotations

import copy
import functools
from importlib import resources

import yaml

from sidecar.config.problems import did_you_mean
from sidecar.core.errors import ConfigError

_SUFFIX = ".yaml"


@functools.cache
def _names() -> tuple[str, ...]:
    folder = resources.files("sidecar") / "presets"
    return tuple(
        sorted(
            entry.name.removesuffix(_SUFFIX)
            for entry in folder.iterdir()
            if entry.name.endswith(_SUFFIX) and entry.is_file()
        )
    )


def preset_names() -> list[str]:
    return list(_names())


@functools.cache
def _parsed(name: str) -> dict[str, object]:
    text = (resources.files("sidecar") / "presets" / f"{name}{_SUFFIX}").read_text("utf-8")
    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise ConfigError("", f"preset {name!r} is not a mapping")
    return data


def load_preset(name: str) -> dict[str, object]:
    """The preset's data; a deep copy, so callers may merge into it freely."""
    # Only listed names reach the file system: no path tricks through ``name``.
    if name not in _names():
        suggestion = did_you_mean(name, _names())
        hint = f"; did you mean {suggestion}?" if suggestion else ""
        raise ConfigError("", f"unknown preset {name!r}; known: {', '.join(_names())}{hint}")
    return copy.deepcopy(_parsed(name))
