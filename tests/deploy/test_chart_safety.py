"""Safe by default: the chart generates and keeps an admin token and a forward-signing secret,
the sidecar defaults fit a pod beside an app (readiness, app port, preStop, native sidecars
only where the cluster has them), the chart's own pods share one identity, passwords stay out of
ConfigMaps, and in the example app nothing reaches the webhook handler but the proxy."""

from __future__ import annotations

import base64
import copy
import shutil
import string
from datetime import UTC, datetime
from pathlib import Path

import helm_python as helm
import pytest
import yaml
from standardwebhooks import Webhook

from sidecar.runtime.wiring import SHUTDOWN_OVERRUN
from tests.deploy.chart_support import (
    CHART,
    REPO,
    VALUES,
    Manifest,
    app_container,
    build_example,
    config_of,
    env_of,
    example_values,
    kinds,
    one,
    pod_of,
    proxy_container,
    render,
    values_of,
)

REFUSED = (helm.HelmValuesError, helm.HelmRenderError)


def secret_data(docs: list[Manifest], suffix: str, key: str) -> str:
    secret = one(docs, "Secret", suffix)
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    return base64.b64decode(secret["data"][key]).decode()


def secret_ref(container: Manifest, var: str) -> dict[str, str]:
    ref: dict[str, str] = env_of(container)[var]["valueFrom"]["secretKeyRef"]
    return ref


# --- §2 the admin token -----------------------------------------------------------------------

def test_an_admin_token_is_generated_by_default(example_chart: Path) -> None:
    for docs in (render(CHART, VALUES["sidecar"]), render(CHART, VALUES["standalone"]),
                 render(example_chart, example_values())):
        token = secret_data(docs, "-admin-token", "token")
        assert len(token) == 32 and set(token) <= set(string.ascii_letters + string.digits)
        assert config_of(docs)["admin_token"] == "${WEBHOOK_SIDECAR_ADMIN_TOKEN}"
    pod = pod_of(docs)  # the example: the proxy in the app's pod reads the generated Secret
    assert secret_ref(proxy_container(pod), "WEBHOOK_SIDECAR_ADMIN_TOKEN") == {
        "name": "shop-webhook-sidecar-admin-token", "key": "token"}
    assert "WEBHOOK_SIDECAR_ADMIN_TOKEN" not in env_of(app_container(pod))


def test_generated_secrets_are_looked_up_before_a_new_value_is_made() -> None:
    """Upgrades keep the value in the cluster: the generating template looks it up first (the
    offline render cannot reach a cluster, so this reads the template)."""
    template = (CHART / "templates" / "secrets.yaml").read_text()
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    assert template.count('include "webhook-sidecar.keptSecretData"') == 2
    assert 'lookup "v1" "Secret" $ctx.Release.Namespace $name' in helpers


def test_an_existing_admin_token_secret_replaces_the_generated_one() -> None:
    docs = render(CHART, VALUES["realistic"])
    assert not [s for s in kinds(docs, "Secret") if s["metadata"]["name"].endswith("-admin-token")]
    assert secret_ref(proxy_container(pod_of(docs)), "WEBHOOK_SIDECAR_ADMIN_TOKEN") == {
        "name": "webhook-sidecar-admin", "key": "token"}


def test_no_admin_token_when_generation_is_off() -> None:
    docs = render(CHART, values_of("standalone", adminToken={"generate": False}))
    assert not [s for s in kinds(docs, "Secret") if s["metadata"]["name"].endswith("-admin-token")]
    assert "admin_token" not in config_of(docs)
    assert "WEBHOOK_SIDECAR_ADMIN_TOKEN" not in env_of(proxy_container(pod_of(docs)))


# --- §1 forward signing ----------------------------------------------------------------------

def test_forwards_are_signed_with_a_generated_standard_webhooks_secret(
        example_chart: Path) -> None:
    docs = render(example_chart, example_values())
    secret = secret_data(docs, "-forward-signing", "secret")
    assert secret.startswith("whsec_") and len(base64.b64decode(secret[6:])) == 32
    assert config_of(docs)["upstream"]["signing_secrets"] == ["${WEBHOOK_SIDECAR_SIGNING_SECRET}"]
    pod = pod_of(docs)
    expected = {"name": "shop-webhook-sidecar-forward-signing", "key": "secret"}
    # The proxy signs with it; the app gets the same variable to verify with.
    assert secret_ref(proxy_container(pod), "WEBHOOK_SIDECAR_SIGNING_SECRET") == expected
    assert secret_ref(app_container(pod), "WEBHOOK_SIDECAR_SIGNING_SECRET") == expected
    # What the app does with it: the standardwebhooks library verifies a signature made with it.
    hook = Webhook(secret)
    when = datetime.now(tz=UTC)
    signature = hook.sign("msg_1", when, '{"id": 1}')
    headers = {"webhook-id": "msg_1", "webhook-timestamp": str(int(when.timestamp())),
               "webhook-signature": signature}
    assert hook.verify('{"id": 1}', headers) == {"id": 1}


def test_forward_signing_from_an_existing_secret_or_off(example_chart: Path) -> None:
    values = example_values()
    values["webhookSidecar"]["forwardSigning"] = {"existingSecret": {"name": "orders-forward",
                                                                     "key": "whsec"}}
    docs = render(example_chart, values)
    assert not [s for s in kinds(docs, "Secret") if "forward-signing" in s["metadata"]["name"]]
    pod = pod_of(docs)
    for container in (proxy_container(pod), app_container(pod)):
        assert secret_ref(container, "WEBHOOK_SIDECAR_SIGNING_SECRET") == {
            "name": "orders-forward", "key": "whsec"}
    values["webhookSidecar"]["forwardSigning"] = {"enabled": False}
    docs = render(example_chart, values)
    assert not [s for s in kinds(docs, "Secret") if "forward-signing" in s["metadata"]["name"]]
    assert "signing_secrets" not in config_of(docs)["upstream"]
    pod = pod_of(docs)
    for container in (proxy_container(pod), app_container(pod)):
        assert "WEBHOOK_SIDECAR_SIGNING_SECRET" not in env_of(container)


# --- §3 sidecar defaults ----------------------------------------------------------------------

def readiness(docs: list[Manifest]) -> str:
    path: str = proxy_container(pod_of(docs))["readinessProbe"]["httpGet"]["path"]
    return path


def test_readiness_defaults_by_mode(example_chart: Path) -> None:
    """Beside an app, a store outage must not take the app's other traffic out of its Service."""
    assert readiness(render(example_chart, example_values())) == "/healthz"
    assert readiness(render(CHART, VALUES["standalone"])) == "/readyz"
    assert readiness(render(CHART, values_of("standalone", readinessPath="/healthz"))) == (
        "/healthz")


def test_the_app_port_has_a_default_apart_from_the_proxy_port() -> None:
    values = copy.deepcopy(VALUES["sidecar"])
    values.pop("sidecar")
    config = config_of(render(CHART, values))
    chart_values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert chart_values["sidecar"]["appPort"] != chart_values["ports"]["proxy"]
    assert config["upstream"]["url"] == f"http://127.0.0.1:{chart_values['sidecar']['appPort']}"


def test_native_sidecars_need_kubernetes_1_29(example_chart: Path) -> None:
    values = example_values(native=True)
    with pytest.raises(REFUSED) as info:
        render(example_chart, values, kube_version="1.28.9")
    assert "sidecar.native needs Kubernetes >= 1.29" in str(info.value)
    pod = pod_of(render(example_chart, values, kube_version="1.29.0"))
    assert [c["name"] for c in pod["initContainers"]] == ["webhook-sidecar-migrate",
                                                          "webhook-sidecar"]
    # The chart alone (no pod) refuses too: its ConfigMap runs the same checks.
    with pytest.raises(REFUSED):
        render(CHART, {**VALUES["sidecar"], "sidecar": {"native": True}}, kube_version="1.27.0")


def app_pre_stop(pod: Manifest) -> tuple[str, int]:
    pre_stop = app_container(pod)["lifecycle"]["preStop"]
    if "sleep" in pre_stop:
        return "sleep", int(pre_stop["sleep"]["seconds"])
    command = pre_stop["exec"]["command"]
    assert command[0] == "sleep"
    return "exec", int(command[1])


def test_the_app_outlives_the_proxys_drain(example_chart: Path) -> None:
    chart_values = yaml.safe_load((CHART / "values.yaml").read_text())
    pre_stop, shutdown = chart_values["preStopSleepSeconds"], chart_values["shutdownTimeoutSeconds"]
    drain = pre_stop + shutdown + int(SHUTDOWN_OVERRUN)
    # Classic: both containers get SIGTERM together; the app keeps serving through the drain.
    for version, action in (("1.29.0", "exec"), ("1.30.0", "sleep"), ("1.33.1", "sleep")):
        pod = pod_of(render(example_chart, example_values(), kube_version=version))
        assert app_pre_stop(pod) == (action, drain), version
        assert drain <= pod["terminationGracePeriodSeconds"]
    # Native: the proxy is stopped after the app; the app waits out only the endpoint removal.
    pod = pod_of(render(example_chart, example_values(native=True), kube_version="1.31.0"))
    assert app_pre_stop(pod) == ("sleep", pre_stop)
    assert "lifecycle" not in proxy_container(pod)


def test_the_image_tag_follows_the_subcharts_app_version(tmp_path: Path) -> None:
    """No hard-coded version: the example reads the dependency's Chart.AppVersion."""
    chart = tmp_path / "helm" / "webhook-sidecar" / "Chart.yaml"
    shutil.copytree(REPO / "helm", tmp_path / "helm",
                    ignore=shutil.ignore_patterns("charts", "Chart.lock"))
    chart.write_text(chart.read_text().replace('appVersion: "0.1.0"', 'appVersion: "9.8.7"'))
    example = tmp_path / "helm" / "examples" / "app-with-sidecar"
    helm.dependency_build(example)
    image = proxy_container(pod_of(render(example, example_values())))["image"]
    assert image == "registry.example.com/platform/webhook-sidecar:9.8.7"


def test_a_dict_context_is_refused_with_a_pointer_to_subcharts(tmp_path: Path) -> None:
    example = build_example(tmp_path)
    deployment = example / "templates" / "deployment.yaml"
    deployment.write_text(deployment.read_text().replace(
        "$sidecar := .Subcharts.webhookSidecar",
        '$sidecar := dict "Values" .Values.webhookSidecar "Release" .Release'))
    with pytest.raises(REFUSED) as info:
        render(example, example_values())
    assert ".Subcharts" in str(info.value)


def test_image_registry_and_global_image_registry() -> None:
    image = {"registry": "registry.example.com/", "repository": "platform/webhook-sidecar",
             "tag": "1.2.3"}
    docs = render(CHART, values_of("standalone", image=image))
    assert proxy_container(pod_of(docs))["image"] == (
        "registry.example.com/platform/webhook-sidecar:1.2.3")
    docs = render(CHART, values_of("standalone", image=image,
                                   **{"global": {"imageRegistry": "mirror.internal:5000"}}))
    assert proxy_container(pod_of(docs))["image"] == (
        "mirror.internal:5000/platform/webhook-sidecar:1.2.3")


def test_standalone_extra_volumes_and_priority_class() -> None:
    docs = render(CHART, values_of(
        "standalone", extraVolumes=[{"name": "ca", "configMap": {"name": "corp-ca"}}],
        extraVolumeMounts=[{"name": "ca", "mountPath": "/etc/corp-ca", "readOnly": True}],
        standalone={**VALUES["standalone"]["standalone"], "priorityClassName": "webhooks"}))
    pod = pod_of(docs)
    volumes = {v["name"] for v in pod["volumes"]}
    assert all(m["name"] in volumes for m in proxy_container(pod)["volumeMounts"])
    assert {"name": "ca", "configMap": {"name": "corp-ca"}} in pod["volumes"]
    assert pod["priorityClassName"] == "webhooks"


POD_IDENTITY = {
    "imagePullSecrets": [{"name": "corp-registry"}],
    "serviceAccountName": "webhooks",
    "podSecurityContext": {"runAsNonRoot": True, "runAsUser": 20000, "fsGroup": 20000},
}


def test_the_standalone_pod_uses_the_pod_identity() -> None:
    store = {"existingSecret": {"name": "db", "key": "url"}}
    docs = render(CHART, values_of("standalone", store=store, **POD_IDENTITY))
    pod = pod_of(docs)
    assert pod["imagePullSecrets"] == POD_IDENTITY["imagePullSecrets"]
    assert pod["serviceAccountName"] == "webhooks"
    assert POD_IDENTITY["podSecurityContext"].items() <= pod["securityContext"].items()
    assert pod["automountServiceAccountToken"] is False
    assert [c["name"] for c in pod["initContainers"]] == ["webhook-sidecar-migrate"]


@pytest.mark.parametrize("url", [
    "postgresql://sidecar:hunter2@db:5432/sidecar",
    "postgres://sidecar:@db/sidecar",
    "postgresql://sidecar:p%40ss@db.svc/sidecar?sslmode=require",
    "mysql://sidecar:hunter2@mysql.db:3306/sidecar",
    "mariadb://sidecar:pw@mariadb.db/sidecar?ssl=true",
])
def test_a_store_url_with_a_password_is_refused(url: str) -> None:
    with pytest.raises(REFUSED) as info:
        render(CHART, values_of("sidecar", store={"url": url}))
    assert "store.existingSecret" in str(info.value)


@pytest.mark.parametrize("url", [
    "postgresql://sidecar@db:5432/sidecar",
    "postgresql://db.svc:5432/sidecar",
    "postgresql://sidecar:${PGPASSWORD}@db:5432/sidecar",
    "mysql://sidecar@mysql.db:3306/sidecar",
    "mariadb://sidecar:${MYSQL_PASSWORD}@mariadb.db/sidecar?ssl=true",
])
def test_a_store_url_without_an_inline_password_renders(url: str) -> None:
    assert config_of(render(CHART, values_of("sidecar", store={"url": url})))["store"]["url"] == url


@pytest.mark.parametrize("store", [
    {"url": "mysql://sidecar@mysql.db:3306/sidecar"},
    {"url": "mariadb://sidecar@mariadb.db/sidecar"},
    {"existingSecret": {"name": "mysql-dsn", "key": "dsn"}},  # the Secret holds mysql://…
])
def test_a_mysql_store_is_migrated_first_and_may_serve_several_replicas(
    store: dict[str, object],
) -> None:
    values = values_of("standalone", store=store)
    values["standalone"]["replicaCount"] = 2  # refused on SQLite
    docs = render(CHART, values)
    pod = pod_of(docs)
    assert one(docs, "Deployment")["spec"]["replicas"] == 2
    assert [c["name"] for c in pod["initContainers"]] == ["webhook-sidecar-migrate"]
    assert "webhook-sidecar-data" not in [v["name"] for v in pod["volumes"]], "no SQLite volume"
    if "existingSecret" in store:
        for container in [*pod["initContainers"], proxy_container(pod)]:
            assert secret_ref(container, "WEBHOOK_SIDECAR_STORE_URL") == {
                "name": "mysql-dsn", "key": "dsn"}



# --- §1 nothing reaches the app's webhook handler but the proxy -------------------------------

def container_port(pod: Manifest, target: int | str) -> tuple[str, int]:
    """The container and port a Service targetPort (a number or a port name) lands on."""
    for container in [*pod.get("initContainers", []), *pod["containers"]]:
        for port in container.get("ports", []):
            if target in (port["containerPort"], port.get("name")):
                return container["name"], int(port["containerPort"])
    assert isinstance(target, int), f"targetPort {target!r} names no container port"
    return "", target  # a number no container declares: still a port of the pod


def exposed(docs: list[Manifest], pod_labels: dict[str, str],
            pod: Manifest) -> dict[str, tuple[str, int]]:
    """Every Service port that selects the pod: "<service>/<port name>" -> (container, port)."""
    out = {}
    for service in kinds(docs, "Service"):
        selector = service["spec"].get("selector") or {}
        if selector and selector.items() <= pod_labels.items():
            for port in service["spec"]["ports"]:
                target = port.get("targetPort", port["port"])
                out[f"{service['metadata']['name']}/{port['name']}"] = container_port(pod, target)
    return out


@pytest.mark.parametrize("native", [False, True])
def test_the_example_app_exposes_its_webhook_handler_to_no_one_but_the_proxy(
        example_chart: Path, native: bool) -> None:
    docs = render(example_chart, example_values(native=native))
    deployment = one(docs, "Deployment")
    pod, labels = deployment["spec"]["template"]["spec"], deployment["spec"]["template"][
        "metadata"]["labels"]
    app_port = int(example_values()["webhookSidecar"]["sidecar"]["appPort"])
    assert config_of(docs)["upstream"]["url"] == f"http://127.0.0.1:{app_port}"
    # The handler binds loopback only, on a port no container declares ...
    assert env_of(app_container(pod))["WEBHOOK_LISTEN"]["value"] == f"127.0.0.1:{app_port}"
    declared = {p["containerPort"] for c in [*pod.get("initContainers", []), *pod["containers"]]
                for p in c.get("ports", [])}
    assert app_port not in declared
    # ... and no Service port lands on it.
    reach = exposed(docs, labels, pod)
    assert app_port not in {port for _, port in reach.values()}, reach
    # The app's Service sends webhooks only to the proxy's listener; its other port reaches the
    # app's own traffic port; the admin port only through the metrics Service.
    proxy = proxy_container(pod)
    proxy_port = next(p["containerPort"] for p in proxy["ports"] if p["name"] == "webhooks")
    admin_port = next(p["containerPort"] for p in proxy["ports"] if p["name"] == "webhook-admin")
    assert reach == {
        "shop-orders/webhooks": ("webhook-sidecar", proxy_port),
        "shop-orders/http": ("app", example_values()["port"]),
        "shop-webhook-sidecar-metrics/webhook-admin": ("webhook-sidecar", admin_port),
    }


def policy_ports(rule: Manifest) -> set[int | str]:
    return {p["port"] for p in rule.get("ports", [])}


def test_the_network_policy_is_off_by_default_and_opens_only_what_it_says(
        example_chart: Path) -> None:
    assert not kinds(render(example_chart, example_values()), "NetworkPolicy")
    assert not kinds(render(CHART, VALUES["standalone"]), "NetworkPolicy")
    values = example_values()
    app_traffic = {"ports": [{"port": values["port"], "protocol": "TCP"}]}
    values["webhookSidecar"]["networkPolicy"] = {"enabled": True, "extraIngress": [app_traffic]}
    docs = render(example_chart, values)
    policy = one(docs, "NetworkPolicy")
    deployment = one(docs, "Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    webhooks, admin, extra = policy["spec"]["ingress"]
    sidecar = values["webhookSidecar"]
    chart_values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert policy_ports(webhooks) == {chart_values["ports"]["proxy"]} and "from" not in webhooks
    assert policy_ports(admin) == {chart_values["ports"]["admin"]}
    assert admin["from"] == [{"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "monitoring"}}}]
    assert extra == app_traffic
    # Every Service port still reaches its pod through the policy; the handler port never.
    pod = deployment["spec"]["template"]["spec"]
    allowed = set().union(*(policy_ports(rule) for rule in policy["spec"]["ingress"]))
    assert {port for _, port in exposed(docs, labels, pod).values()} <= allowed
    assert sidecar["sidecar"]["appPort"] not in allowed


def test_the_network_policy_sources_are_configurable() -> None:
    ingress_nginx = [{"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "ingress-nginx"}}}]
    prometheus = [{"namespaceSelector": {"matchLabels": {"team": "observability"}},
                   "podSelector": {"matchLabels": {"app": "prometheus"}}}]
    docs = render(CHART, values_of("standalone", networkPolicy={
        "enabled": True, "webhookFrom": ingress_nginx, "adminFrom": prometheus}))
    policy = one(docs, "NetworkPolicy")
    assert policy["spec"]["podSelector"]["matchLabels"] == one(docs, "Deployment")["spec"][
        "selector"]["matchLabels"]
    webhooks, admin = policy["spec"]["ingress"]
    assert webhooks["from"] == ingress_nginx and admin["from"] == prometheus
    with pytest.raises(REFUSED) as info:
        render(CHART, values_of("sidecar", networkPolicy={"enabled": True}))
    assert "sidecar.podSelector" in str(info.value)
