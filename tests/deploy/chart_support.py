"""Rendering the Helm chart offline (helm-python-sdk, Helm's Go SDK) and reading the result:
shared by the chart tests (test_helm_chart, test_chart_safety, test_monitoring,
test_kustomize, test_chart_docs)."""

from __future__ import annotations

import base64
import copy
import json
import re
import shutil
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import yaml
from helm_python import _native

from sidecar.obs.metrics import Metrics

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "webhook-sidecar"
EXAMPLE = REPO / "helm" / "examples" / "app-with-sidecar"
VALUES = {name: yaml.safe_load((CHART / "ci" / f"{name}-values.yaml").read_text())
          for name in ("sidecar", "standalone", "realistic")}
# The oldest Kubernetes with native sidecars on by default, and the newest the schemas know.
KUBE_VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
# A valid Standard Webhooks secret (what the chart generates: whsec_ + base64 of 32 bytes).
SIGNING_SECRET = "whsec_" + base64.b64encode(bytes(range(32))).decode()

Manifest = dict[str, Any]


def build_example(root: Path) -> Path:
    """A copy of helm/ under ``root`` with the example app chart's dependency built."""
    shutil.copytree(REPO / "helm", root / "helm",
                    ignore=shutil.ignore_patterns("charts", "Chart.lock"))
    chart = root / "helm" / "examples" / "app-with-sidecar"
    helm.dependency_build(chart)
    return chart


def render_files(chart: Path, values: dict[str, Any] | None = None, *, name: str = "shop",
                 namespace: str = "shop", kube_version: str | None = None,
                 api_versions: list[str] | None = None) -> dict[str, str]:
    """The rendered templates by path; ``kube_version``/``api_versions`` set .Capabilities
    (the SDK's render options, which the Python wrapper does not expose as arguments)."""
    with helm.Chart.load(chart) as loaded:
        if kube_version is None and api_versions is None:
            out: dict[str, str] = loaded.render(values, name=name, namespace=namespace,
                                                is_install=True)
            return out
        opts: dict[str, Any] = {"name": name, "namespace": namespace, "is_install": True}
        if kube_version is not None:
            opts["kube_version"] = kube_version
        if api_versions is not None:
            opts["api_versions"] = api_versions
        raw = _native.call_string("helm_render", loaded._raw(),
                                  json.dumps(values) if values is not None else None,
                                  json.dumps(opts))
        rendered: dict[str, str] = json.loads(raw)
        return rendered


def render(chart: Path, values: dict[str, Any] | None = None, *, tests: bool = False,
           **kw: Any) -> list[Manifest]:
    """The manifests (NOTES.txt left out; the `helm test` hooks only when ``tests``)."""
    docs = []
    for path, text in sorted(render_files(chart, values, **kw).items()):
        if path.endswith("NOTES.txt") or ("/templates/tests/" in path and not tests):
            continue
        docs += [d for d in yaml.safe_load_all(text) if d]
    return docs


def notes(chart: Path, values: dict[str, Any] | None = None, **kw: Any) -> str:
    return next(text for path, text in render_files(chart, values, **kw).items()
                if path.endswith("NOTES.txt"))


def example_values(**sidecar: Any) -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load((EXAMPLE / "values.yaml").read_text())
    values["webhookSidecar"]["sidecar"].update(sidecar)
    return values


def values_of(base: str, **top: Any) -> dict[str, Any]:
    values = copy.deepcopy(VALUES[base])
    values.update(copy.deepcopy(top))
    return values


def kinds(docs: list[Manifest], kind: str) -> list[Manifest]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[Manifest], kind: str, name_suffix: str = "") -> Manifest:
    found = [d for d in kinds(docs, kind) if d["metadata"]["name"].endswith(name_suffix)]
    assert len(found) == 1, (kind, name_suffix, [d["metadata"]["name"] for d in found])
    return found[0]


def pod_of(docs: list[Manifest]) -> Manifest:
    spec: Manifest = one(docs, "Deployment")["spec"]["template"]["spec"]
    return spec


def config_of(docs: list[Manifest], name_suffix: str = "-config") -> dict[str, Any]:
    configmap = one(docs, "ConfigMap", name_suffix)
    config: dict[str, Any] = yaml.safe_load(configmap["data"]["config.yaml"])
    return config


def proxy_container(pod: Manifest) -> Manifest:
    found = [c for c in [*pod.get("initContainers", []), *pod["containers"]]
             if c["name"] == "webhook-sidecar"]
    assert len(found) == 1
    return found[0]


def app_container(pod: Manifest) -> Manifest:
    found = [c for c in pod["containers"] if c["name"] == "app"]
    assert len(found) == 1
    return found[0]


def named_port(container: Manifest, name: str) -> int:
    return int(next(p["containerPort"] for p in container["ports"] if p["name"] == name))


def port_of(address: str) -> int:
    return int(address.rpartition(":")[2])


def env_of(container: Manifest) -> dict[str, Manifest]:
    return {e["name"]: e for e in container.get("env", [])}


def materialise(config: dict[str, Any], pod: Manifest | None,
                root: Path) -> tuple[Any, dict[str, str]]:
    """The config with its mounted secret files under ``root`` and the environment the pod
    would give it (dummy secret values, a PostgreSQL URL, an admin token, a signing secret)."""
    config = copy.deepcopy(config)
    for provider in config["providers"].values():
        for ref in provider["secrets"]:
            if "file" in ref:
                local = root / Path(ref["file"]).relative_to("/")
                local.parent.mkdir(parents=True, exist_ok=True)
                local.write_text(SIGNING_SECRET + "\n")  # valid for every preset
                ref["file"] = str(local)
    if pod is not None:  # what the pod sets from Secrets
        names = [var["name"] for var in proxy_container(pod)["env"] if "valueFrom" in var]
    else:  # no pod rendered (sidecar mode alone): everything the config refers to
        text = yaml.safe_dump(config)
        names = re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)", text) + [
            ref["env"] for provider in config["providers"].values()
            for ref in provider["secrets"] if "env" in ref]
    env = {name: {
        "WEBHOOK_SIDECAR_STORE_URL": "postgresql://sidecar:pw@db:5432/sidecar",
        "WEBHOOK_SIDECAR_ADMIN_TOKEN": "admin-token-0123456789",
        "WEBHOOK_SIDECAR_SIGNING_SECRET": SIGNING_SECRET,
    }.get(name, "rendered-secret-value") for name in names}
    return config, env


def metric_names() -> set[str]:
    """Every series name the proxy exports (labelled families have no samples until used)."""
    suffixes = {"counter": ("_total",), "gauge": ("",),
                "histogram": ("_bucket", "_sum", "_count")}
    return {family.name + suffix for family in Metrics().registry.collect()
            for suffix in suffixes[family.type]}


def metric_labels() -> dict[str, set[str]]:
    """The label names of every exported series (histogram series add ``le`` to buckets)."""
    out: dict[str, set[str]] = {}
    for metric in Metrics().__dict__.values():
        names = getattr(metric, "_labelnames", None)
        family = getattr(metric, "_name", None)
        if names is None or family is None:
            continue
        kind = metric._type  # prometheus_client keeps the type on the object
        series = {"counter": [family + "_total"], "gauge": [family],
                  "histogram": [family + s for s in ("_bucket", "_sum", "_count")]}[kind]
        for name in series:
            out[name] = set(names) | ({"le"} if name.endswith("_bucket") else set())
    return out
