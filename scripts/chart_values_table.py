#!/usr/bin/env python3
"""The values table of helm/webhook-sidecar/README.md, generated from the comments in the
chart's values.yaml: a key's description is the comment block right above it (same indent, no
blank line between) followed by its end-of-line comment.

    python scripts/chart_values_table.py            # print the table
    python scripts/chart_values_table.py --write    # replace it in the README
    python scripts/chart_values_table.py --check    # exit 1 when the README's table is stale
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
VALUES = ROOT / "helm" / "webhook-sidecar" / "values.yaml"
README = ROOT / "helm" / "webhook-sidecar" / "README.md"
START, END = "<!-- values-table:start -->", "<!-- values-table:end -->"
KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][A-Za-z0-9_]*):(?P<rest>.*)$")
INLINE = re.compile(r"""^(?P<value>(?:[^#'"]|'[^']*'|"[^"]*")*?)\s+#\s?(?P<comment>.*)$""")


def comments(text: str) -> dict[str, str]:
    """Each key path ("a.b.c") and its description."""
    lines = text.splitlines()
    found: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    skip_deeper_than: int | None = None
    for number, line in enumerate(lines):
        match = KEY.match(line)
        if not match:
            continue
        indent = len(match["indent"])
        if skip_deeper_than is not None:
            if indent > skip_deeper_than:
                continue
            skip_deeper_than = None
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join([key for _, key in stack] + [match["key"]])
        stack.append((indent, match["key"]))
        block: list[str] = []
        above = number - 1
        while above >= 0 and lines[above].strip().startswith("#") and (
                len(lines[above]) - len(lines[above].lstrip()) == indent):
            block.insert(0, lines[above].strip().lstrip("#").strip())
            above -= 1
        inline = INLINE.match(match["rest"])
        if inline:
            block.append(inline["comment"].strip())
        found[path] = " ".join(part for part in block if part)
        # A block list (the next content line starts with "-"): its items are the value.
        following = next((other for other in lines[number + 1:] if other.strip()
                          and not other.strip().startswith("#")), "")
        if not match["rest"].strip() and following.strip().startswith("-"):
            skip_deeper_than = indent
    return found


def leaves(values: Any, prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.append((path, ...))  # a section
            out += leaves(value, f"{path}.")
        else:
            out.append((path, value))
    return out


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(text: str) -> str:
    described = comments(text)
    rows = ["| key | default | description |", "|---|---|---|"]
    for path, value in leaves(yaml.safe_load(text)):
        description = described.get(path, "")
        if value is ...:
            if description:
                rows.append(f"| `{path}` | | {cell(description)} |")
            continue
        shown = json.dumps(value, ensure_ascii=False)
        if len(shown) > 60:
            shown = "see values.yaml"
        else:
            shown = f"`{cell(shown)}`"
        rows.append(f"| `{path}` | {shown} | {cell(description)} |")
    return "\n".join(rows) + "\n"


def readme_with_table(readme: str, values_text: str) -> str:
    head, rest = readme.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{table(values_text)}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", action="store_true", help=f"update {README.relative_to(ROOT)}")
    group.add_argument("--check", action="store_true", help="exit 1 when the README is stale")
    args = parser.parse_args(argv)
    values_text = VALUES.read_text(encoding="utf-8")
    if not (args.write or args.check):
        sys.stdout.write(table(values_text))
        return 0
    current = README.read_text(encoding="utf-8")
    wanted = readme_with_table(current, values_text)
    if args.check:
        if current != wanted:
            print(f"{README.relative_to(ROOT)} is stale: run scripts/chart_values_table.py --write",
                  file=sys.stderr)
            return 1
        return 0
    README.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
