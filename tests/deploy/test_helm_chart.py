"""The Helm chart, rendered offline with Helm's Go SDK (helm-python-sdk): it lints, renders in
sidecar mode (the example app chart that includes the named templates, classic and native) and
standalone mode and for realistic values, every manifest validates against the Kubernetes
schemas, the rendered config passes the config schema and the loader with its secrets mounted
the way the pod mounts them, and bad values are refused at install time."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest
import yaml

from sidecar.config.blocks import BLOCKS, TOP
from sidecar.config.loader import parse_config
from sidecar.config.schema import SCHEMA_FILE
from sidecar.config.schema.chart import CHART_OWNED, CHART_SCHEMA_FILE, chart_schema_text
from sidecar.core.durations import parse_duration
from sidecar.runtime.wiring import SHUTDOWN_OVERRUN
from tests.deploy.chart_support import (
    CHART,
    KUBE_VERSIONS,
    REPO,
    VALUES,
    Manifest,
    config_of,
    example_values,
    kinds,
    materialise,
    named_port,
    one,
    pod_of,
    port_of,
    proxy_container,
    render,
    values_of,
)

RENDERINGS = ["sidecar", "standalone", "realistic", "example", "example-native"]


def render_named(name: str, example_chart: Path,
                 kube_version: str | None = None) -> list[Manifest]:
    if name.startswith("example"):
        return render(example_chart, example_values(native=name == "example-native"),
                      kube_version=kube_version)
    return render(CHART, VALUES[name], kube_version=kube_version)


@pytest.fixture(scope="module")
def rendered(example_chart: Path) -> dict[str, list[Manifest]]:
    return {name: render_named(name, example_chart) for name in RENDERINGS}


# --- lint -------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(VALUES))
def test_chart_lints_strictly(name: str) -> None:
    report = helm.lint(CHART, VALUES[name], strict=True, kube_version="v1.29.0")
    assert report["errors"] == [] and report["messages"] == [], report


def test_default_values_lack_only_a_provider() -> None:
    """The defaults are complete except for what only the user knows: a provider."""
    report = helm.lint(CHART, strict=True)
    assert report["errors"] and all("/providers" in e for e in report["errors"]), report
    assert not helm.lint(CHART, {"providers": VALUES["sidecar"]["providers"]},
                         strict=True)["errors"]


def test_example_app_chart_lints_strictly(example_chart: Path) -> None:
    report = helm.lint(example_chart, strict=True, kube_version="v1.29.0")
    assert report["errors"] == [] and report["messages"] == [], report


# --- every manifest is valid Kubernetes -----------------------------------------------------

SERVICE_MONITOR_SUBSET = {  # the fields this chart sets, as the prometheus-operator CRD types them
    "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {"spec": {
        "type": "object", "additionalProperties": False, "required": ["selector", "endpoints"],
        "properties": {
            "selector": {"type": "object", "properties": {"matchLabels": {
                "type": "object", "additionalProperties": {"type": "string"}}}},
            "namespaceSelector": {"type": "object", "properties": {
                "matchNames": {"type": "array", "items": {"type": "string"}}}},
            "endpoints": {"type": "array", "minItems": 1, "items": {
                "type": "object", "additionalProperties": False, "required": ["port"],
                "properties": {"port": {"type": "string"}, "path": {"type": "string"},
                               "interval": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                               "scrapeTimeout": {"type": "string",
                                                 "pattern": "^[0-9]+(ms|s|m|h)$"}}}},
        }}},
}
PROMETHEUS_RULE_SUBSET = {
    "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {"spec": {
        "type": "object", "additionalProperties": False, "required": ["groups"],
        "properties": {"groups": {"type": "array", "minItems": 1, "items": {
            "type": "object", "additionalProperties": False, "required": ["name", "rules"],
            "properties": {"name": {"type": "string"}, "rules": {"type": "array", "items": {
                "type": "object", "additionalProperties": False, "required": ["alert", "expr"],
                "properties": {
                    "alert": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
                    "expr": {"type": "string"},
                    "for": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h|d)$"},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "annotations": {"type": "object",
                                    "additionalProperties": {"type": "string"}}}}}}}}}}},
}
POD_MONITOR_SUBSET = {
    "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {"spec": {
        "type": "object", "additionalProperties": False,
        "required": ["selector", "podMetricsEndpoints"],
        "properties": {
            "selector": {"type": "object", "additionalProperties": False,
                         "required": ["matchLabels"], "properties": {"matchLabels": {
                             "type": "object", "minProperties": 1,
                             "additionalProperties": {"type": "string"}}}},
            "namespaceSelector": {"type": "object", "properties": {
                "matchNames": {"type": "array", "items": {"type": "string"}}}},
            "podMetricsEndpoints": {"type": "array", "minItems": 1, "items": {
                "type": "object", "additionalProperties": False, "required": ["port"],
                "properties": {"port": {"type": "string"}, "path": {"type": "string"},
                               "interval": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                               "scrapeTimeout": {"type": "string",
                                                 "pattern": "^[0-9]+(ms|s|m|h)$"}}}},
        }}},
}
MONITORING_SUBSETS = {"ServiceMonitor": SERVICE_MONITOR_SUBSET, "PodMonitor": POD_MONITOR_SUBSET,
                      "PrometheusRule": PROMETHEUS_RULE_SUBSET}


def validate_manifests(docs: list[Manifest], version: str) -> None:
    """Every manifest against the Kubernetes schemas of ``version`` (prometheus-operator kinds
    against the subsets above)."""
    assert docs
    for doc in docs:
        if doc["apiVersion"] == "monitoring.coreos.com/v1":
            jsonschema.validate(doc, MONITORING_SUBSETS[doc["kind"]])
            continue
        kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize("version", KUBE_VERSIONS)
@pytest.mark.parametrize("name", RENDERINGS)
def test_rendered_manifests_validate_against_the_kubernetes_schemas(
        name: str, version: str, example_chart: Path) -> None:
    """Rendered for each Kubernetes version (the chart adapts to .Capabilities) and validated
    against that version's schemas."""
    docs = render_named(name, example_chart, kube_version=version)
    validate_manifests(docs, version)


# --- the sidecar pod --------------------------------------------------------------------------

def check_pod_runs_the_proxy(docs: list[Manifest], pod: Manifest, service: Manifest) -> None:
    """The wiring a running pod depends on, checked on the rendered objects."""
    config = config_of(docs)
    proxy = proxy_container(pod)
    # The Service's webhook port reaches the proxy, which listens there.
    target = next(p["targetPort"] for p in service["spec"]["ports"] if p["name"] == "webhooks")
    assert named_port(proxy, target) == port_of(config["listen"])
    assert config["listen"].startswith("0.0.0.0:")
    # Probes and metrics on the admin listener, reachable by the kubelet (not 127.0.0.1).
    admin = named_port(proxy, "webhook-admin")
    assert config["admin_listen"] == f"0.0.0.0:{admin}"
    assert proxy["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "webhook-admin"}
    assert proxy["readinessProbe"]["httpGet"]["port"] == "webhook-admin"
    assert proxy["readinessProbe"]["httpGet"]["path"] in ("/readyz", "/healthz")
    assert proxy["startupProbe"]["httpGet"]["port"] == "webhook-admin"
    # The config file: the env var names it, a volume of the rendered ConfigMap holds it.
    env = {e["name"]: e for e in proxy["env"]}
    mounts = {m["name"]: m for m in proxy["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    config_path = Path(env["WEBHOOK_SIDECAR_CONFIG"]["value"])
    config_mount = next(m for m in mounts.values() if m["mountPath"] == str(config_path.parent))
    configmap = one(docs, "ConfigMap", "-config")["metadata"]["name"]
    assert volumes[config_mount["name"]]["configMap"]["name"] == configmap
    # No subPath: updated Secrets (and ConfigMaps) reach the running pod.
    assert all("subPath" not in m for m in proxy["volumeMounts"])
    # Every secret the config names is there: files in mounted Secret volumes, env from Secrets.
    for provider in config["providers"].values():
        for ref in provider["secrets"]:
            if "file" in ref:
                path = Path(ref["file"])
                mount = next(m for m in mounts.values() if m["mountPath"] == str(path.parent))
                secret = volumes[mount["name"]]["secret"]
                assert secret["secretName"] == path.parent.name and "items" not in secret
            elif "env" in ref:
                assert "secretKeyRef" in env[ref["env"]]["valueFrom"]
    for var in re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)", yaml.safe_dump(config)):
        assert var in env, f"the config interpolates ${{{var}}} but the container has no {var}"
    # Graceful shutdown, exit included, fits in the grace period; the container runs as
    # non-root.
    # A native sidecar is stopped after the app, when the endpoints are gone: no preStop sleep.
    grace = pod["terminationGracePeriodSeconds"]
    native = proxy in pod.get("initContainers", [])
    pre_stop = 0 if native else int(proxy["lifecycle"]["preStop"]["exec"]["command"][1])
    assert native == ("lifecycle" not in proxy)
    shutdown = parse_duration(config["shutdown_timeout"], "shutdown_timeout")
    assert pre_stop + shutdown + SHUTDOWN_OVERRUN <= grace
    context = proxy["securityContext"]
    assert context["runAsNonRoot"] is True and context["runAsUser"] != 0
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert proxy["resources"]["requests"]["cpu"] and proxy["resources"]["requests"]["memory"]


def test_sidecar_pod_has_the_app_and_the_proxy(rendered: dict[str, list[Manifest]]) -> None:
    docs = rendered["example"]
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["app", "webhook-sidecar"]
    assert [c["name"] for c in pod["initContainers"]] == ["webhook-sidecar-migrate"]
    config = config_of(docs)
    app_env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    app_port = port_of(app_env["WEBHOOK_LISTEN"])
    assert app_env["WEBHOOK_LISTEN"] == f"127.0.0.1:{app_port}"
    assert config["upstream"]["url"] == f"http://127.0.0.1:{app_port}"
    check_pod_runs_the_proxy(docs, pod, one(docs, "Service", "-orders"))
    annotations = one(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert re.fullmatch(r"[0-9a-f]{64}", annotations["checksum/webhook-sidecar-config"])


def test_readiness_follows_the_store_unless_told_otherwise(example_chart: Path) -> None:
    for path in ("/readyz", "/healthz"):
        values = example_values()
        values["webhookSidecar"]["readinessPath"] = path
        pod = one(render(example_chart, values), "Deployment")["spec"]["template"]["spec"]
        assert proxy_container(pod)["readinessProbe"]["httpGet"]["path"] == path


def test_native_sidecar_is_an_init_container_that_keeps_running(
        rendered: dict[str, list[Manifest]]) -> None:
    docs = rendered["example-native"]
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["app"]
    assert [c["name"] for c in pod["initContainers"]] == ["webhook-sidecar-migrate",
                                                          "webhook-sidecar"]
    assert pod["initContainers"][1]["restartPolicy"] == "Always"
    check_pod_runs_the_proxy(docs, pod, one(docs, "Service", "-orders"))


@pytest.mark.parametrize("name", ["standalone", "realistic"])
def test_standalone_deployment_and_service_front_the_upstream(
        name: str, rendered: dict[str, list[Manifest]]) -> None:
    docs = rendered[name]
    deployment = one(docs, "Deployment")
    service = one(docs, "Service", "-webhook-sidecar")
    pod = deployment["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["webhook-sidecar"]
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert config_of(docs)["upstream"]["url"] == VALUES[name]["standalone"]["upstreamUrl"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    check_pod_runs_the_proxy(docs, pod, service)


# --- the rendered config is one the proxy accepts --------------------------------------------

@pytest.mark.parametrize("name", RENDERINGS)
def test_rendered_config_passes_the_schema_and_the_loader(
        name: str, rendered: dict[str, list[Manifest]], tmp_path: Path) -> None:
    docs = rendered[name]
    config = config_of(docs)
    schema = json.loads((REPO / SCHEMA_FILE).read_text())
    jsonschema.validate(config, schema, cls=jsonschema.Draft202012Validator)
    # The chart alone in sidecar mode renders no pod (the app chart does).
    pod = (one(docs, "Deployment")["spec"]["template"]["spec"]
           if kinds(docs, "Deployment") else None)
    data, env = materialise(config, pod, tmp_path)
    parsed = parse_config(data, env=env, base_dir=tmp_path)
    assert [p.key for p in parsed.providers] == sorted(config["providers"])
    if pod is not None:
        assert parsed.shutdown_timeout + SHUTDOWN_OVERRUN <= pod["terminationGracePeriodSeconds"]


@pytest.mark.parametrize("name", ["realistic", "example", "example-native"])
def test_migrate_runs_first_in_every_proxy_pod_on_postgres(
        rendered: dict[str, list[Manifest]], name: str) -> None:
    """An init container, not a Helm hook: it starts when the pod does, after Helm has created
    the config and the Secrets it reads (docs/design.md, "The schema step in the chart")."""
    docs = rendered[name]
    assert kinds(docs, "Job") == []
    assert not [d for d in docs if "helm.sh/hook" in d["metadata"].get("annotations", {})]
    pod = pod_of(docs)
    migrate, *rest = pod["initContainers"]
    proxy = proxy_container(pod)
    assert migrate["name"] == "webhook-sidecar-migrate" and migrate["args"] == ["migrate"]
    # The same image, config, env and secrets as the proxy beside it.
    for key in ("image", "env", "volumeMounts", "securityContext"):
        assert migrate[key] == proxy[key], key
    # Before the native proxy, which would otherwise start on an old schema.
    assert [c["name"] for c in rest] == (["webhook-sidecar"] if name == "example-native" else [])


def test_sqlite_and_migrate_disabled_render_no_migrate_step(
        rendered: dict[str, list[Manifest]]) -> None:
    # SQLite migrates itself.
    assert "initContainers" not in pod_of(rendered["standalone"])
    docs = render(CHART, values_of("realistic", migrate={"enabled": False}))
    assert "initContainers" not in pod_of(docs)


# --- monitoring -------------------------------------------------------------------------------

def test_service_monitor_scrapes_the_admin_port(rendered: dict[str, list[Manifest]]) -> None:
    for name in ("realistic", "example"):
        docs = rendered[name]
        monitor = one(docs, "ServiceMonitor")
        service = one(docs, "Service", "-metrics")
        assert monitor["spec"]["selector"]["matchLabels"].items() <= (
            service["metadata"]["labels"].items())
        endpoint = monitor["spec"]["endpoints"][0]
        assert endpoint["port"] == service["spec"]["ports"][0]["name"] == "webhook-admin"
        assert endpoint["path"] == "/metrics"
        pod = one(docs, "Deployment")["spec"]["template"]
        assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()


# --- bad values fail at install time ---------------------------------------------------------

def bad(base: str, change: Any) -> dict[str, Any]:
    values = copy.deepcopy(VALUES[base])
    change(values)
    return values


INVALID_VALUES = [
    ("unknown-mode", bad("sidecar", lambda v: v.update(mode="daemonset")), "mode"),
    ("unknown-top-key", bad("sidecar", lambda v: v.update(replicas=3)), "replicas"),
    ("no-providers", bad("sidecar", lambda v: v.update(providers={})), "providers"),
    ("provider-key-uppercase", bad("sidecar", lambda v: v.update(
        providers={"Stripe": v["providers"]["stripe"]})), "Stripe"),
    ("provider-without-path", bad("sidecar", lambda v: v["providers"]["stripe"].pop("path")),
     "path"),
    ("provider-unknown-key", bad("sidecar", lambda v: v["providers"]["stripe"].update(
        leese="30s")), "leese"),
    ("provider-without-secrets", bad("sidecar", lambda v: v["providers"]["stripe"].pop(
        "secrets")), "secrets"),
    ("secret-ref-without-key", bad("sidecar", lambda v: v["providers"]["stripe"].update(
        secrets=[{"secretKeyRef": {"name": "stripe-webhook"}}])), "key"),
    ("secret-ref-bad-mode", bad("sidecar", lambda v: v["providers"]["stripe"].update(
        secrets=[{"secretKeyRef": {"name": "s", "key": "k"}, "as": "volume"}])), "as"),
    ("port-zero", bad("sidecar", lambda v: v.update(ports={"proxy": 0, "admin": 9090})),
     "proxy"),
    ("ports-equal", bad("sidecar", lambda v: v.update(ports={"proxy": 9090, "admin": 9090})),
     "must differ"),
    ("app-port-is-proxy-port", bad("sidecar", lambda v: v["sidecar"].update(appPort=8080)),
     "appPort"),
    ("standalone-without-upstream", bad("standalone", lambda v: v["standalone"].pop(
        "upstreamUrl")), "upstreamUrl"),
    ("standalone-upstream-not-url", bad("standalone", lambda v: v["standalone"].update(
        upstreamUrl="orders:8080")), "upstreamUrl"),
    ("grace-too-short", bad("standalone", lambda v: v.update(
        terminationGracePeriodSeconds=30, shutdownTimeoutSeconds=25, preStopSleepSeconds=5)),
     "terminationGracePeriodSeconds"),
    ("grace-without-time-to-exit", bad("standalone", lambda v: v.update(
        terminationGracePeriodSeconds=5 + 25 + int(SHUTDOWN_OVERRUN) - 1,
        shutdownTimeoutSeconds=25, preStopSleepSeconds=5)), "must not exceed"),
    ("sqlite-with-replicas", bad("standalone", lambda v: v["standalone"].update(
        replicaCount=3)), "PostgreSQL"),
    ("chart-owned-config-key", bad("sidecar", lambda v: v.update(
        config={"upstream": {"url": "http://elsewhere"}})), "url"),
    ("config-unknown-key", bad("sidecar", lambda v: v.update(config={"lsten": "x"})), "lsten"),
    ("config-bad-log-level", bad("sidecar", lambda v: v.update(
        config={"log": {"level": "verbose"}})), "level"),
    ("store-url-unknown-scheme", bad("sidecar", lambda v: v.update(
        store={"url": "mssql://db/sidecar"})), "url"),
    ("image-digest-not-sha256", bad("sidecar", lambda v: v.update(
        image={"repository": "x", "digest": "latest"})), "digest"),
    ("monitor-without-pod-selector", bad("sidecar", lambda v: v.update(
        metrics={"serviceMonitor": {"enabled": True}})), "podSelector"),
    ("signature-ratio-over-one", bad("realistic", lambda v: v["metrics"]["prometheusRule"].update(
        signatureFailures={"ratio": 2})), "ratio"),
]


@pytest.mark.parametrize(("values", "mentions"), [(v, m) for _, v, m in INVALID_VALUES],
                         ids=[i for i, _, _ in INVALID_VALUES])
def test_invalid_values_are_rejected(values: dict[str, Any], mentions: str) -> None:
    with pytest.raises((helm.HelmValuesError, helm.HelmRenderError)) as info:
        render(CHART, values)
    assert mentions in str(info.value)


def test_grace_period_check_uses_the_proxys_real_shutdown_bound() -> None:
    """The proxy exits at most SHUTDOWN_OVERRUN seconds after shutdown_timeout: a grace period
    of exactly preStop + shutdown_timeout + that renders (one second less does not, above)."""
    values = copy.deepcopy(VALUES["standalone"])
    values.update(terminationGracePeriodSeconds=5 + 25 + int(SHUTDOWN_OVERRUN),
                  shutdownTimeoutSeconds=25, preStopSleepSeconds=5)
    pod = one(render(CHART, values), "Deployment")["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 5 + 25 + SHUTDOWN_OVERRUN


def test_lint_reports_schema_violations() -> None:
    report = helm.lint(CHART, {**VALUES["sidecar"], "mode": "daemonset"}, strict=True)
    assert any("mode" in error for error in report["errors"]), report


# --- the chart's contract with the config loader ----------------------------------------------

def test_values_schema_config_part_is_the_generated_one() -> None:
    committed = (REPO / CHART_SCHEMA_FILE).read_text(encoding="utf-8")
    assert committed == chart_schema_text(committed), (
        f"the generated parts of {CHART_SCHEMA_FILE} are stale: run "
        "`python -m sidecar.config.schema --write` and commit the result")
    jsonschema.Draft7Validator.check_schema(json.loads(committed))


def test_values_schema_knows_every_provider_key_and_no_chart_owned_config_key() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    provider = schema["properties"]["providers"]["additionalProperties"]
    assert set(provider["properties"]) == BLOCKS["providers.<key>"].names
    config = schema["properties"]["config"]["properties"]
    owned = {"listen", "admin_listen", "shutdown_timeout", "providers", "admin_token"}
    assert set(config) == TOP.names - owned
    in_upstream = {k.removeprefix("upstream.") for k in CHART_OWNED if k.startswith("upstream.")}
    assert set(config["upstream"]["properties"]) == BLOCKS["upstream"].names - in_upstream
    assert set(config["store"]["properties"]) == BLOCKS["store"].names - {"url"}
    assert set(config["log"]["properties"]) == BLOCKS["log"].names
    assert set(config["maintenance"]["properties"]) == BLOCKS["maintenance"].names


def _paths(config: dict[str, Any], prefix: str = "") -> set[str]:
    found = set()
    for name, value in config.items():
        path = f"{prefix}{name}"
        found.add(path)
        if isinstance(value, dict) and name != "providers":
            found |= _paths(value, f"{path}.")
    return found


def test_the_keys_the_chart_owns_are_the_ones_its_template_sets(
        rendered: dict[str, list[Manifest]]) -> None:
    """CHART_OWNED (left out of the values' ``config``) is what the template writes itself."""
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())["config"]
    set_by_template: set[str] = set()
    for name in ("sidecar", "standalone", "realistic"):
        user = _paths(defaults) | _paths(VALUES[name].get("config") or {})
        set_by_template |= _paths(config_of(rendered[name])) - user
    assert set_by_template - {"upstream", "store"} == set(CHART_OWNED)


def test_default_image_tag_is_the_charts_app_version(rendered: dict[str, list[Manifest]]) -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    image = proxy_container(one(rendered["example"], "Deployment")["spec"]["template"]["spec"])[
        "image"]
    assert image.endswith(":" + chart["appVersion"])




# --- the values shown in the docs render ----------------------------------------------------

def doc_values() -> list[tuple[str, dict[str, Any]]]:
    text = (REPO / "docs" / "kubernetes.md").read_text(encoding="utf-8")
    found = []
    for index, block in enumerate(re.findall(r"```yaml\n(.*?)```", text, re.S)):
        if "{{" in block:
            continue
        data = yaml.safe_load(block)
        if isinstance(data, dict) and "mode" in data:
            found.append((f"block-{index}", data))
        elif isinstance(data, dict) and "webhookSidecar" in data:
            found.append((f"block-{index}", data["webhookSidecar"]))
    return found


DOC_VALUES = doc_values()


@pytest.mark.parametrize(("block", "values"), DOC_VALUES, ids=[b for b, _ in DOC_VALUES])
def test_values_shown_in_the_docs_render_and_validate(
        block: str, values: dict[str, Any], tmp_path: Path) -> None:
    docs = render(CHART, values)
    for doc in docs:
        if doc["apiVersion"] != "monitoring.coreos.com/v1":
            kubernetes_validate.validate(doc, KUBE_VERSIONS[-1], strict=True)
    pod = (one(docs, "Deployment")["spec"]["template"]["spec"]
           if kinds(docs, "Deployment") else None)
    data, env = materialise(config_of(docs), pod, tmp_path)
    parse_config(data, env=env, base_dir=tmp_path)


def test_the_docs_show_both_modes() -> None:
    assert {values["mode"] for _, values in DOC_VALUES} == {"sidecar", "standalone"}


# --- tracing ----------------------------------------------------------------------------------

def test_tracing_values_become_the_standard_otel_variables() -> None:
    def otel_env(values: dict[str, Any]) -> dict[str, Any]:
        container = proxy_container(pod_of(render(CHART, values)))
        return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]
                if e["name"].startswith("OTEL_")}

    assert otel_env(VALUES["standalone"]) == {}  # off unless asked for
    values = {**VALUES["standalone"], "tracing": {
        "endpoint": "http://otel-collector.observability:4318", "serviceName": "hooks",
        "resourceAttributes": {"deployment.environment.name": "prod", "team": "payments"},
        "sampler": "parentbased_traceidratio", "samplerArg": "0.25",
        "headersSecret": {"name": "otel-auth", "key": "headers"}}}
    assert otel_env(values) == {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel-collector.observability:4318",
        "OTEL_SERVICE_NAME": "hooks",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment.name=prod,team=payments",
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": "0.25",
        "OTEL_EXPORTER_OTLP_HEADERS": {"secretKeyRef": {"name": "otel-auth", "key": "headers"}},
    }
