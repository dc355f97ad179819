"""What the docs say about the chart agrees with what the chart renders:

where a page states the default readiness path per mode ("the chart's default `readinessPath`
is `A` in sidecar mode and `B` in standalone mode"), A and B are the paths the rendered probes
use with the default values of each mode. (The objects `kubectl` commands name:
tests/deploy/test_kubernetes_doc.py.)"""

from __future__ import annotations

import re
from pathlib import Path

from tests.deploy.chart_support import (
    CHART,
    REPO,
    VALUES,
    example_values,
    pod_of,
    proxy_container,
    render,
)

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
READINESS_CLAIM = re.compile(r"default\s+`readinessPath`\s+is\s+`([^`]+)`\s+in\s+sidecar\s+mode"
                             r"\s+and\s+`([^`]+)`\s+in\s+standalone\s+mode")


def _readiness(chart: Path, values: dict[str, object], name: str) -> str:
    probe = proxy_container(pod_of(render(chart, values, name=name)))["readinessProbe"]
    return str(probe["httpGet"]["path"])


def test_the_readiness_default_the_docs_state_is_the_rendered_one(example_chart: Path) -> None:
    sidecar = _readiness(example_chart, example_values(), "orders")
    standalone_values = {k: v for k, v in VALUES["standalone"].items() if k != "readinessPath"}
    standalone = _readiness(CHART, standalone_values, "webhooks")
    claims = {page.relative_to(REPO).as_posix(): READINESS_CLAIM.findall(page.read_text())
              for page in PAGES}
    claimed = {page: found for page, found in claims.items() if found}
    # The store-outage runbook and the guarantees both say what a store outage does to pods.
    assert {"docs/operations.md", "docs/guarantees.md"} <= set(claimed)
    for page, found in claimed.items():
        assert set(found) == {(sidecar, standalone)}, page
