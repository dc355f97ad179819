"""Shipped like infrastructure: the chart's README values table is generated from values.yaml
and current, Chart.yaml's metadata (icon, maintainers, Artifact Hub annotations) points at
things that exist, the repository has its license and policies, the `helm test` pod's check
passes against a proxy that answers as it should and fails against one that does not, and the
install notes and docs say how to verify the first delivery and the proxy's signature."""

from __future__ import annotations

import http.server
import re
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import kubernetes_validate
import pytest
import yaml

from tests.deploy.chart_support import (
    CHART,
    KUBE_VERSIONS,
    REPO,
    VALUES,
    example_values,
    notes,
    one,
    render,
    values_of,
)

README = CHART / "README.md"


def test_the_readme_values_table_is_current() -> None:
    result = subprocess.run([sys.executable, str(REPO / "scripts" / "chart_values_table.py"),
                             "--check"], cwd=REPO, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_the_readme_table_lists_every_value_and_describes_every_top_level_key() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    text = README.read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `([^`]+)` \|[^|]*\| (.*) \|$", text, re.M))
    for key in values:
        described = [d for path, d in rows.items()
                     if (path == key or path.startswith(f"{key}.")) and d.strip()]
        assert described, f"values.yaml: {key} has no comment"
    for path in ("adminToken.generate", "forwardSigning.enabled", "networkPolicy.adminFrom",
                 "metrics.podMonitor.enabled", "grafanaDashboard.labels.grafana_dashboard",
                 "tests.webhookBaseUrl", "sidecar.appPort", "readinessPath"):
        assert path in rows, path


def test_chart_metadata_points_at_things_that_exist() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    icon = urlparse(chart["icon"])
    # raw.githubusercontent.com/<owner>/<repo>/<branch>/<path>: the file is in this repository.
    path = Path(*icon.path.split("/")[4:])
    assert icon.netloc == "raw.githubusercontent.com" and (REPO / path).is_file(), path
    assert (REPO / path).read_text().lstrip().startswith("<svg")
    assert chart["maintainers"] and all(m["name"] for m in chart["maintainers"])
    annotations = chart["annotations"]
    assert annotations["artifacthub.io/license"] == "MIT"
    for key in ("artifacthub.io/links", "artifacthub.io/images", "artifacthub.io/changes"):
        parsed = yaml.safe_load(annotations[key])
        assert isinstance(parsed, list) and parsed, key
    (image,) = yaml.safe_load(annotations["artifacthub.io/images"])
    assert image["image"].endswith(":" + chart["appVersion"])
    for link in yaml.safe_load(annotations["artifacthub.io/links"]):
        url = urlparse(link["url"])
        if "/blob/main/" in url.path:
            assert (REPO / url.path.split("/blob/main/")[1]).is_file(), link


def test_the_repository_has_its_license_and_policies() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    license_text = (REPO / "LICENSE").read_text()
    assert project["license"]["text"] == "MIT" and license_text.startswith("MIT License")
    assert "private vulnerability reporting" in (REPO / "SECURITY.md").read_text()
    contributing = (REPO / "CONTRIBUTING.md").read_text()
    for script in ("scripts/chart_values_table.py", "scripts/kustomize_component.py"):
        assert script in contributing and (REPO / script).is_file()


# --- helm test ------------------------------------------------------------------------------

class FakeProxy(http.server.BaseHTTPRequestHandler):
    readyz = 200
    unsigned = 401

    def do_GET(self) -> None:
        self.answer(self.readyz if self.path == "/readyz" else 404)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.answer(self.unsigned if "webhook-signature" not in self.headers else 200)

    def answer(self, status: int) -> None:
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def fake_proxy() -> Iterator[tuple[str, type[FakeProxy]]]:
    handler = type("Handler", (FakeProxy,), {})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


def helm_test_pod(docs: list[Any]) -> dict[str, Any]:
    pod: dict[str, Any] = one(docs, "Pod", "-test")
    return pod


def test_the_helm_test_pod_checks_readyz_and_an_unsigned_post(
        fake_proxy: tuple[str, type[FakeProxy]]) -> None:
    docs = render(CHART, VALUES["realistic"], tests=True)
    pod = helm_test_pod(docs)
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    for version in KUBE_VERSIONS:
        kubernetes_validate.validate(pod, version, strict=True)
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["WEBHOOK_URL"] == "http://shop-webhook-sidecar.shop.svc:80/webhooks/acme"
    assert env["ADMIN_URL"] == "http://shop-webhook-sidecar-metrics.shop.svc:9090"
    assert container["image"] == "registry.example.com/platform/webhook-sidecar:0.1.0"
    assert container["command"][:2] == ["python", "-c"]
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    base, handler = fake_proxy

    def run() -> int:
        test_env = {"WEBHOOK_URL": base + "/webhooks/acme", "ADMIN_URL": base}
        return subprocess.run([sys.executable, "-c", container["command"][2]], env=test_env,
                              capture_output=True, timeout=60, check=False).returncode
    assert run() == 0
    handler.unsigned = 200  # a proxy that forwards unsigned requests fails the test
    assert run() == 1
    handler.unsigned, handler.readyz = 401, 503  # and so does one that is not ready
    assert run() == 1


def test_the_helm_test_pod_in_sidecar_mode_goes_through_the_apps_service(
        example_chart: Path) -> None:
    pod = helm_test_pod(render(example_chart, example_values(), tests=True))
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert env["WEBHOOK_URL"] == "http://shop-orders.shop.svc:80/webhooks/shopify"
    # Without a URL for the app's Service (the chart alone in sidecar mode): no test pod.
    assert not [d for d in render(CHART, VALUES["sidecar"], tests=True) if d["kind"] == "Pod"]
    assert not [d for d in render(CHART, values_of("standalone", tests={"enabled": False}),
                                  tests=True) if d["kind"] == "Pod"]


# --- notes and docs -------------------------------------------------------------------------

def test_the_install_notes_say_how_to_verify_the_first_delivery() -> None:
    text = notes(CHART, VALUES["standalone"])
    assert "kubectl -n shop port-forward svc/shop-webhook-sidecar 8080:80" in text
    assert "webhook-sidecar send --preset github" in text
    assert "--url http://127.0.0.1:8080/webhooks/github --file event.json" in text
    assert "shop-webhook-sidecar-admin-token" in text
    assert "loopback" in notes(CHART, values_of("sidecar", adminToken={"generate": False}))


def test_the_send_flags_in_the_docs_exist() -> None:
    help_text = subprocess.run([sys.executable, "-m", "sidecar", "send", "--help"], cwd=REPO,
                               capture_output=True, text=True, check=False).stdout
    if not help_text:  # the console script's module entry point
        help_text = subprocess.run(["webhook-sidecar", "send", "--help"], capture_output=True,
                                   text=True, check=False).stdout
    docs = (REPO / "docs" / "kubernetes.md").read_text(encoding="utf-8")
    text = docs + notes(CHART, VALUES["standalone"])
    for flag in set(re.findall(r"webhook-sidecar send[^`]*?(--[a-z-]+)", text, re.S)) | {
            "--preset", "--secret", "--url", "--file", "--config", "--provider"}:
        assert flag in help_text, flag


def test_the_docs_show_how_to_verify_the_proxys_signature() -> None:
    """kubernetes.md says which signature to check and leads to the code (docs/app-side.md,
    whose examples tests/docs/test_verify_snippets.py runs against real forwards)."""
    docs = (REPO / "docs" / "kubernetes.md").read_text(encoding="utf-8")
    section = docs.split("## Verify the proxy's signature in your app", 1)[1].split("\n## ", 1)[0]
    assert "](app-side.md)" in section and (REPO / "docs" / "app-side.md").is_file()
    assert "not the provider's" in section
    assert "## Verify the first delivery" in docs
