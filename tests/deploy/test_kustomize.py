"""The Kustomize component is the chart's sidecar, current, and applies to a Deployment: run
with `kubectl kustomize` when kubectl is installed, else with a pure-Python strategic merge of
its patch; the result validates against the Kubernetes schemas and its config loads."""

from __future__ import annotations

import copy
import hashlib
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from sidecar.config.loader import parse_config
from tests.deploy.chart_support import (
    KUBE_VERSIONS,
    REPO,
    Manifest,
    app_container,
    materialise,
    proxy_container,
)

COMPONENT = REPO / "kustomize" / "webhook-sidecar-component"
SCRIPT = REPO / "scripts" / "kustomize_component.py"
APP = {
    "apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {"name": "vendor-app", "labels": {"app": "vendor-app",
                                                   "webhook-sidecar.io/inject": "true"}},
    "spec": {"selector": {"matchLabels": {"app": "vendor-app"}}, "template": {
        "metadata": {"labels": {"app": "vendor-app"}},
        "spec": {"containers": [{"name": "app", "image": "vendor/app:1.2.3",
                                 "ports": [{"name": "http", "containerPort": 8000}]}]}}},
}
OTHER = {**copy.deepcopy(APP), "metadata": {"name": "untouched", "labels": {"app": "other"}}}


def test_the_component_is_generated_from_the_current_chart() -> None:
    result = subprocess.run([sys.executable, str(SCRIPT), "--check"], cwd=REPO,
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def merge_named(base: list[Manifest], patch: list[Manifest]) -> list[Manifest]:
    """A strategic merge of lists keyed by ``name`` (containers, volumes)."""
    out = [copy.deepcopy(item) for item in base]
    for item in patch:
        same = [i for i, existing in enumerate(out) if existing["name"] == item["name"]]
        if same:
            out[same[0]] = {**out[same[0]], **item}
        else:
            out.append(copy.deepcopy(item))
    return out


def apply_in_python(tmp: Path) -> list[Manifest]:
    """What `kubectl kustomize` does with the component, for the parts it uses."""
    kustomization = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())
    generator = kustomization["configMapGenerator"][0]
    data = {name: (COMPONENT / name).read_text() for name in generator["files"]}
    configmap = {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": generator["name"]}, "data": data}
    digest = hashlib.sha256(yaml.safe_dump(configmap, sort_keys=True).encode()).hexdigest()[:10]
    hashed = f"{generator['name']}-{digest}"
    configmap["metadata"]["name"] = hashed
    (entry,) = kustomization["patches"]
    key, value = entry["target"]["labelSelector"].split("=")
    patch = yaml.safe_load((COMPONENT / entry["path"]).read_text())["spec"]["template"]["spec"]
    out: list[Manifest] = [configmap]
    for deployment in (copy.deepcopy(APP), copy.deepcopy(OTHER)):
        if deployment["metadata"]["labels"].get(key) == value:
            pod = deployment["spec"]["template"]["spec"]
            pod["containers"] = merge_named(pod["containers"], patch["containers"])
            pod["initContainers"] = merge_named(pod.get("initContainers", []),
                                                patch["initContainers"])
            pod["volumes"] = merge_named(pod.get("volumes", []), patch["volumes"])
            pod["terminationGracePeriodSeconds"] = patch["terminationGracePeriodSeconds"]
            for volume in pod["volumes"]:  # the generator's name reference
                if volume.get("configMap", {}).get("name") == generator["name"]:
                    volume["configMap"]["name"] = hashed
        out.append(deployment)
    return out


def apply_with_kubectl(tmp: Path) -> list[Manifest]:
    shutil.copytree(COMPONENT, tmp / "webhook-sidecar-component")  # kustomize: relative only
    overlay = tmp / "overlay"
    overlay.mkdir()
    (overlay / "app.yaml").write_text(yaml.safe_dump_all([APP, OTHER]))
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": ["app.yaml"], "components": ["../webhook-sidecar-component"],
        "images": [{"name": "webhook-sidecar",
                    "newName": "registry.example.com/platform/webhook-sidecar"}]}))
    result = subprocess.run(["kubectl", "kustomize", str(overlay)], capture_output=True,
                            text=True, check=False, timeout=120)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


@pytest.mark.parametrize("how", ["kubectl", "python"])
def test_the_component_adds_the_sidecar_to_labelled_deployments(how: str,
                                                                 tmp_path: Path) -> None:
    if how == "kubectl" and shutil.which("kubectl") is None:
        how = "python"  # no kubectl here: the pure-Python application stands in
    docs = apply_with_kubectl(tmp_path) if how == "kubectl" else apply_in_python(tmp_path)
    by_name: dict[str, Any] = {d["metadata"]["name"]: d for d in docs}
    (configmap,) = [d for d in docs if d["kind"] == "ConfigMap"]
    assert configmap["metadata"]["name"].startswith("webhook-sidecar-config-")
    pod = by_name["vendor-app"]["spec"]["template"]["spec"]
    assert sorted(c["name"] for c in pod["containers"]) == ["app", "webhook-sidecar"]
    assert app_container(pod)["image"] == "vendor/app:1.2.3"
    proxy = proxy_container(pod)
    if how == "kubectl":
        assert proxy["image"].startswith("registry.example.com/platform/webhook-sidecar:")
    # The schema step runs first, with the proxy's image, config and secrets.
    [migrate] = pod["initContainers"]
    assert migrate["args"] == ["migrate"]
    assert (migrate["image"], migrate["env"]) == (proxy["image"], proxy["env"])
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert all(m["name"] in volumes for m in proxy["volumeMounts"])
    assert volumes["webhook-sidecar-config"]["configMap"]["name"] == configmap["metadata"]["name"]
    untouched = by_name["untouched"]["spec"]["template"]["spec"]
    assert [c["name"] for c in untouched["containers"]] == ["app"]
    for doc in docs:
        kubernetes_validate.validate(doc, KUBE_VERSIONS[-1], strict=True)
    # The config the pod mounts is one the proxy loads, with the env the pod gives it.
    config = yaml.safe_load(configmap["data"]["config.yaml"])
    assert config["upstream"]["url"] == "http://127.0.0.1:3000"
    data, env = materialise(config, pod, tmp_path)
    parse_config(data, env=env, base_dir=tmp_path)
