"""What to change when keys disagree: ``fix`` names the keys to raise or lower, each with its
default (a provider's: its preset's value), and never the value of a key that may hold a
secret."""

from __future__ import annotations

import contextlib
import dataclasses
import re
from typing import Final

from sidecar.config.blocks import BLOCKS
from sidecar.config.declarations import NO_DEFAULT
from sidecar.config.presets import load_preset
from sidecar.core.errors import ConfigError

# Keys whose default is never printed (their values are secrets or may carry one).
_SECRET_LIKE: Final = re.compile(r"secret|token|password|passwd|credential|private|api_?key",
                                 re.IGNORECASE)


def is_secret(rule: str) -> bool:
    """Whether the key at ``rule`` (``store.url``, ``providers.<key>.secrets``) holds or may
    hold a secret: by its name, or its field kept out of ``repr``."""
    if _SECRET_LIKE.search(rule):
        return True
    parent, _, name = rule.rpartition(".")
    block = BLOCKS.get(parent)
    key = block.keys.get(name) if block is not None else None
    if block is None or key is None or block.model is None or key.fills is None:
        return False
    hidden = {f.name for f in dataclasses.fields(block.model) if not f.repr}
    return key.fills in hidden


def default_of(rule: str, preset: object = None) -> str:
    """`` (default 60s)`` for the key at ``rule`` (a provider's: its preset's value when the
    preset sets it); empty for a key without a default or holding a secret."""
    if is_secret(rule):
        return ""
    parent, _, name = rule.rpartition(".")
    if parent == "providers.<key>" and isinstance(preset, str):
        with contextlib.suppress(ConfigError):
            preset_value = load_preset(preset).get(name)
            if preset_value is not None:
                return f" ({preset} preset: {preset_value})"
    block = BLOCKS.get(parent)
    key = block.keys.get(name) if block is not None else None
    if key is None or key.default is NO_DEFAULT:
        return ""
    return f" (default {key.default})"


def fix(*changes: tuple[str, str, str], preset: object = None) -> str:
    """``; to fix, raise providers.stripe.lease (default 60s) or lower upstream.timeout
    (default 10s)`` for changes (verb, key path, rule)."""
    parts = [f"{verb} {where}{default_of(rule, preset)}" for verb, where, rule in changes]
    return "; to fix, " + " or ".join(parts)
