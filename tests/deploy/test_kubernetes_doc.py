"""What docs/kubernetes.md, docs/first-deploy.md and the chart's README and notes say about the
chart, checked against the chart as it renders: the alerts it adds, the keys it owns, the
objects `kubectl` commands name, a local image's name and tag, the migrate step."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from sidecar.config.schema.chart import CHART_OWNED
from tests.deploy.chart_support import (
    CHART,
    REPO,
    example_values,
    kinds,
    notes,
    render,
    values_of,
)

DOCS = [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md", CHART / "README.md",
        REPO / "helm" / "README.md", REPO / "kustomize" / "webhook-sidecar-component" / "README.md"]
KUBERNETES = REPO / "docs" / "kubernetes.md"
NUMBERS = {"nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14}


def text(path: Path) -> str:
    # Joined lines, so a phrase the reflow split in two still reads as one.
    return re.sub(r"\s*\n\s*", " ", path.read_text(encoding="utf-8"))


def first_deploy_values() -> dict[str, object]:
    doc = (REPO / "docs" / "first-deploy.md").read_text(encoding="utf-8")
    [values] = [yaml.safe_load(b) for b in re.findall(r"^```yaml\n(.*?)^```$", doc, re.M | re.S)
                if "mode: standalone" in b]
    assert isinstance(values, dict)
    return values


def test_the_number_of_alerts_is_the_rules_count() -> None:
    docs = render(CHART, values_of("realistic", metrics={"prometheusRule": {"enabled": True}}))
    [rule] = kinds(docs, "PrometheusRule")
    alerts = [r["alert"] for group in rule["spec"]["groups"] for r in group["rules"]]
    said = re.findall(r"adds (\w+) alerts", text(KUBERNETES))
    assert said and all(NUMBERS[word] == len(alerts) for word in said), (said, alerts)


def test_the_keys_the_chart_owns_are_listed_whole() -> None:
    [listed] = re.findall(r"The chart owns (.*?); any other config key", text(KUBERNETES))
    named = set(re.findall(r"`([a-z_.]+)`", listed))
    assert set(CHART_OWNED) <= named, set(CHART_OWNED) - named


@pytest.fixture(scope="module")
def rendered_names(example_chart: Path) -> dict[str, set[str]]:
    """Deployment and Service names of the releases the docs install: the first-deploy values
    as `webhooks`, the example app chart as `orders`."""
    docs = [*render(CHART, first_deploy_values(), name="webhooks"),
            *render(example_chart, example_values(), name="orders")]
    return {"deploy": {d["metadata"]["name"] for d in kinds(docs, "Deployment")},
            "svc": {d["metadata"]["name"] for d in kinds(docs, "Service")}}


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_kubectl_names_objects_the_documented_releases_render(
        path: Path, rendered_names: dict[str, set[str]]) -> None:
    for line in path.read_text(encoding="utf-8").splitlines():
        if "kubectl" not in line:
            continue
        for kind, name in re.findall(r"\b(deploy|deployment|svc)/([a-z0-9][a-z0-9.-]*)", line):
            kind = "deploy" if kind == "deployment" else kind
            assert name in rendered_names[kind], (path.name, line, sorted(rendered_names[kind]))


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_a_local_image_is_named_with_its_tag(path: Path) -> None:
    """`pullPolicy=Never` finds only the exact name:tag, and the chart's tag defaults to its
    appVersion: a command that sets the repository of a local image sets the tag too."""
    for command in re.findall(r"[^\n`]*image\.pullPolicy=Never[^\n`]*", path.read_text()):
        assert "image.tag=" in command, (path.name, command)


@pytest.mark.parametrize("path", [*DOCS, CHART / "values.yaml"], ids=lambda p: p.name)
def test_no_page_describes_migrate_as_a_hook(path: Path) -> None:
    said = text(path)
    assert not re.search(r"migrate hook|hook Job|pre-install hook runs", said), path.name


def test_the_notes_warn_that_the_default_image_is_not_released() -> None:
    warning = "no image has been released yet"
    assert warning in notes(CHART, values_of("standalone"))
    own = values_of("standalone", image={"repository": "registry.example.com/webhook-sidecar"})
    assert warning not in notes(CHART, own)


def test_without_a_token_the_admin_port_is_described_as_it_is() -> None:
    """A port-forward arrives as loopback and is served; `events` reads the database and never
    goes through the admin API: neither is "the only way"."""
    said = notes(CHART, values_of("standalone", adminToken={"generate": False}))
    assert "port-forward to the admin port" in said and "reads the database" in said
    for path in (CHART / "values.yaml", CHART / "templates" / "NOTES.txt"):
        assert not re.search(r"only `?kubectl exec", text(path)), path.name
