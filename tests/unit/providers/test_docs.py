"""docs/providers.md documents every preset with the defaults the preset really has."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sidecar.config.presets import load_preset, preset_names

DOC = (Path(__file__).resolve().parents[3] / "docs" / "providers.md").read_text("utf-8")


def section(name: str) -> str:
    match = re.search(rf"^### `{re.escape(name)}`\n(.*?)(?=^### |^## |\Z)", DOC, re.M | re.S)
    assert match is not None, f"no section for {name}"
    return match.group(1)


@pytest.mark.parametrize("name", preset_names())
def test_each_preset_is_documented_with_its_defaults(name: str) -> None:
    preset = load_preset(name)
    text = section(name)
    assert f"  preset: {name}\n" in text  # a config snippet
    defaults = f"- Defaults: retention `{preset['retention']}`, inflight_wait " \
        f"`{preset['inflight_wait']}`"
    assert defaults in text
    row = f"| `{name}` |"
    [line] = [line for line in DOC.splitlines() if line.startswith(row)]
    assert line.endswith(f"| {preset['retention']} | {preset['inflight_wait']} |")


@pytest.mark.parametrize("name", preset_names())
def test_each_preset_documents_its_event_type(name: str) -> None:
    """Where filter.types reads the type, as the preset declares it (or that it has none)."""
    event_type = load_preset(name).get("event_type")
    [line] = [line for line in section(name).splitlines() if line.startswith("- Event type:")]
    if event_type is None:
        assert line.startswith("- Event type: none")
    else:
        source = event_type.get("header") or event_type.get("json")
        assert line.startswith(f"- Event type: `{source}`")
