"""What the docs say about the chart agrees with what the chart renders:

- where a page states the default readiness path per mode ("the chart's default
  `readinessPath` is `A` in sidecar mode and `B` in standalone mode"), A and B are the paths the
  rendered probes use with the default values of each mode;
- every `deploy/NAME` in a `kubectl` command names a Deployment that the documented chart and
  release render: the example app chart as release `orders`, the chart in standalone mode as
  release `webhooks` (the names docs/first-deploy.md and docs/kubernetes.md install them under)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.deploy.chart_support import (
    CHART,
    REPO,
    VALUES,
    example_values,
    kinds,
    pod_of,
    proxy_container,
    render,
)

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
READINESS_CLAIM = re.compile(r"default\s+`readinessPath`\s+is\s+`([^`]+)`\s+in\s+sidecar\s+mode"
                             r"\s+and\s+`([^`]+)`\s+in\s+standalone\s+mode")
KUBECTL_DEPLOY = re.compile(r"\bdeploy(?:ment)?/([a-z0-9][a-z0-9.-]*)")
# Pages whose kubectl lines are being corrected with the chart's own rework.
NOT_YET = {"docs/first-deploy.md", "docs/kubernetes.md"}


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


def kubectl_deployments(text: str) -> list[str]:
    return [name for line in text.splitlines() if "kubectl" in line
            for name in KUBECTL_DEPLOY.findall(line)]


def _rendered_deployments(example_chart: Path) -> set[str]:
    docs = [*render(example_chart, example_values(), name="orders"),
            *render(CHART, VALUES["standalone"], name="webhooks")]
    return {d["metadata"]["name"] for d in kinds(docs, "Deployment")}


@pytest.mark.parametrize("page", [
    pytest.param(p, marks=pytest.mark.xfail(reason="corrected with the chart", strict=False))
    if p.relative_to(REPO).as_posix() in NOT_YET else p
    for p in PAGES], ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_kubectl_deployment_is_one_the_chart_renders(page: Path,
                                                           example_chart: Path) -> None:
    named = kubectl_deployments(page.read_text(encoding="utf-8"))
    if not named:
        return
    rendered = _rendered_deployments(example_chart)
    assert [name for name in named if name not in rendered] == [], (
        f"rendered Deployments: {sorted(rendered)}")


def test_the_kubectl_check_reads_deployment_names() -> None:
    text = "kubectl exec deploy/orders -c webhook-sidecar -- x\nsee deploy/test_x.py\n" \
           "kubectl port-forward deployment/webhooks-webhook-sidecar 9090\n"
    assert kubectl_deployments(text) == ["orders", "webhooks-webhook-sidecar"]
