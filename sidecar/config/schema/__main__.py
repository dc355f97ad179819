"""``python -m sidecar.config.schema``: print the config JSON Schema, or (``--write``) write it,
the reference tables in the docs and the config part of the Helm chart's values schema."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sidecar.config.schema.chart import CHART_SCHEMA_FILE, chart_schema_text
from sidecar.config.schema.document import SCHEMA_FILE, schema_text
from sidecar.config.schema.reference import REFERENCE_DOC, replace_reference


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sidecar.config.schema",
        description="Print the config JSON Schema, or write it, the docs' reference tables and "
        "the Helm chart's values schema.")
    parser.add_argument("--write", action="store_true",
                        help=f"write {SCHEMA_FILE}, the tables in {REFERENCE_DOC} and the "
                        f"generated parts of {CHART_SCHEMA_FILE} under --root")
    parser.add_argument("--root", default=".", help="the repository root (default: .)")
    args = parser.parse_args(argv)
    if not args.write:
        sys.stdout.write(schema_text())
        return 0
    root = Path(args.root)
    (root / SCHEMA_FILE).write_text(schema_text(), encoding="utf-8")
    doc = root / REFERENCE_DOC
    doc.write_text(replace_reference(doc.read_text(encoding="utf-8")), encoding="utf-8")
    chart = root / CHART_SCHEMA_FILE
    chart.write_text(chart_schema_text(chart.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"wrote {root / SCHEMA_FILE}, {doc} and {chart}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
