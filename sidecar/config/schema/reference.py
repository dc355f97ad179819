"""The reference tables in ``docs/configuration.md`` — one per mapping: key, type, default,
meaning — generated from the key declarations on the model's fields (``sidecar.config.model``),
followed by the rules only the loader checks."""

from __future__ import annotations

import json
from typing import Final

from sidecar.config.blocks import BLOCKS
from sidecar.config.declarations import NO_DEFAULT
from sidecar.config.loader import LOADER_ONLY_RULES

REFERENCE_DOC: Final = "docs/configuration.md"
REFERENCE_BEGIN: Final = (
    "<!-- BEGIN GENERATED: config keys (python -m sidecar.config.schema --write) -->")
REFERENCE_END: Final = "<!-- END GENERATED: config keys -->"


def _cell(value: object) -> str:
    if value is NO_DEFAULT:
        return "—"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, list):
        return "`" + json.dumps(value) + "`"
    return f"`{value}`"


def reference_markdown() -> str:
    """The generated section, between its BEGIN and END markers."""
    lines: list[str] = [REFERENCE_BEGIN, ""]
    for prefix, block in BLOCKS.items():
        title = f"`{prefix}`" if prefix else "top level"
        lines += [f"#### {title}", "", block.doc, "", "| key | type | default | meaning |",
                  "|---|---|---|---|"]
        for name, key in block.keys.items():
            full = f"{prefix}.{name}" if prefix else name
            required = " (required)" if key.required else ""
            doc, label = (text.replace("|", "\\|") for text in (key.doc, key.label))
            default = (f"as `{block.inherits}.{name}`" if block.inherits is not None
                       else _cell(key.default))
            lines.append(f"| `{full}`{required} | {label} | {default} | {doc} |")
        lines.append("")
    lines += ["#### Checked by the loader only", "",
              "The schema accepts these; `check-config` and the proxy reject them:", ""]
    lines += [f"- {rule}" for rule in LOADER_ONLY_RULES]
    lines += ["", REFERENCE_END]
    return "\n".join(lines) + "\n"


def _section(document: str) -> tuple[int, int]:
    start = document.index(REFERENCE_BEGIN)
    return start, document.index(REFERENCE_END) + len(REFERENCE_END) + 1


def current_reference(document: str) -> str:
    """The generated section as ``document`` has it."""
    start, end = _section(document)
    return document[start:end]


def replace_reference(document: str) -> str:
    """``document`` with its generated section replaced by the current tables."""
    start, end = _section(document)
    return document[:start] + reference_markdown() + document[end:]
