"""Reaching the proxy from outside: the chart's Ingress and Gateway API HTTPRoute route exactly
the providers' paths (the ones the rendered config serves) to the Service's webhook port and
never the admin port; `trustedProxies` ends up in a config the real loader accepts. Every
manifest validates against the Kubernetes schemas of the oldest version Chart.yaml claims and the
newest, the HTTPRoute against the Gateway API's own v1 schemas (an npm package, run under node,
pinned in tests/deploy/gateway_api/; without node the validation is skipped, with CI=true it
fails)."""

from __future__ import annotations

import copy
import ipaddress
import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from sidecar.config.loader import parse_config
from sidecar.core.errors import ConfigError
from tests.deploy.chart_support import (
    CHART,
    KUBE_VERSIONS,
    REPO,
    VALUES,
    Manifest,
    build_example,
    config_of,
    example_values,
    kinds,
    materialise,
    named_port,
    notes,
    one,
    pod_of,
    port_of,
    proxy_container,
    render,
    values_of,
)
from tests.npm_packages import node_with

REFUSED = (helm.HelmValuesError, helm.HelmRenderError)
GATEWAY_API_DIR = Path(__file__).resolve().parent / "gateway_api"
HOST = "hooks.example.com"

# Four providers, two of them on paths that are not /webhooks/<key>.
PROVIDERS = {
    **VALUES["realistic"]["providers"],
    "shopify": {"path": "/hooks/shop/orders", "preset": "shopify",
                "secrets": [{"secretKeyRef": {"name": "shopify-webhook", "key": "secret"}}]},
    "slack": {"path": "/slack/events", "preset": "slack",
              "secrets": [{"secretKeyRef": {"name": "slack-webhook", "key": "secret"}}]},
}
INGRESS = {"enabled": True, "className": "nginx", "hosts": [HOST, "hooks.example.net"],
           "annotations": {"cert-manager.io/cluster-issuer": "letsencrypt"},
           "tls": [{"secretName": "hooks-tls", "hosts": [HOST]}]}
HTTP_ROUTE = {"enabled": True, "hostnames": [HOST],
              "parentRefs": [{"name": "public", "namespace": "gateway-system",
                              "sectionName": "https"}],
              "annotations": {"team": "payments"}, "labels": {"exposure": "public"}}


def routed(**top: Any) -> dict[str, Any]:
    """The realistic standalone values with more providers and both routes on."""
    values = values_of("realistic", providers=copy.deepcopy(PROVIDERS),
                       ingress=copy.deepcopy(INGRESS), httpRoute=copy.deepcopy(HTTP_ROUTE))
    values.update(copy.deepcopy(top))
    return values


def claimed_minimum() -> str:
    """The oldest Kubernetes Chart.yaml claims (kubeVersion ">=X.Y.Z-0")."""
    claim = yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"]
    match = re.fullmatch(r">=\s*v?(\d+\.\d+\.\d+)(?:-0)?", claim)
    assert match, f"Chart.yaml kubeVersion {claim!r} is not a plain minimum"
    return match[1]


def provider_paths(docs: list[Manifest]) -> set[str]:
    """The paths the rendered config serves (what the proxy's router matches)."""
    return {p["path"] for p in config_of(docs)["providers"].values()}


def webhook_port(docs: list[Manifest]) -> tuple[str, int]:
    """The proxy Service's name and its port that reaches the proxy's listener, checked to be
    the listener and not the admin listener."""
    service = one(docs, "Service", "-webhook-sidecar")
    proxy = proxy_container(pod_of(docs))
    config = config_of(docs)
    [port] = service["spec"]["ports"]  # the webhook port only: the admin one is not there
    assert named_port(proxy, port["targetPort"]) == port_of(config["listen"])
    assert named_port(proxy, port["targetPort"]) != port_of(config["admin_listen"])
    return service["metadata"]["name"], int(port["port"])


# --- off by default ---------------------------------------------------------------------------

@pytest.mark.parametrize("base", ["sidecar", "standalone", "realistic"])
def test_defaults_render_neither_an_ingress_nor_a_route(base: str) -> None:
    docs = render(CHART, VALUES[base])
    assert kinds(docs, "Ingress") == [] and kinds(docs, "HTTPRoute") == []
    assert "trusted_proxies" not in config_of(docs)
    assert "From outside" not in notes(CHART, VALUES[base])


# --- the Ingress ------------------------------------------------------------------------------

def test_the_ingress_routes_exactly_the_providers_paths_to_the_webhook_port() -> None:
    docs = render(CHART, routed())
    ingress = one(docs, "Ingress")
    service, port = webhook_port(docs)
    paths = provider_paths(docs)
    assert paths == {"/webhooks/stripe", "/webhooks/github", "/webhooks/acme",
                     "/hooks/shop/orders", "/slack/events"}
    assert [rule.get("host") for rule in ingress["spec"]["rules"]] == INGRESS["hosts"]
    for rule in ingress["spec"]["rules"]:
        entries = rule["http"]["paths"]
        assert sorted(e["path"] for e in entries) == sorted(paths)
        for entry in entries:
            assert entry["pathType"] == "Exact"  # the proxy matches the literal path
            assert entry["backend"] == {"service": {"name": service, "port": {"number": port}}}
    spec = ingress["spec"]
    assert spec["ingressClassName"] == "nginx" and spec["tls"] == INGRESS["tls"]
    assert ingress["metadata"]["annotations"] == INGRESS["annotations"]


def test_the_ingress_without_hosts_has_one_rule_for_any_host_and_takes_a_path_type() -> None:
    values = routed(ingress={"enabled": True, "pathType": "Prefix"})
    ingress = one(render(CHART, values), "Ingress")
    [rule] = ingress["spec"]["rules"]
    assert "host" not in rule and "tls" not in ingress["spec"]
    assert "ingressClassName" not in ingress["spec"]
    assert {e["pathType"] for e in rule["http"]["paths"]} == {"Prefix"}


def test_a_provider_added_later_is_routed_and_one_removed_is_not() -> None:
    values = routed()
    values["providers"]["linear"] = {"path": "/webhooks/linear-prod", "preset": "linear",
                                     "secrets": ["${LINEAR_SECRET}"]}
    del values["providers"]["acme"]
    values["extraEnv"] = [{"name": "LINEAR_SECRET", "value": "x"}]
    docs = render(CHART, values)
    ingress_paths = {e["path"] for rule in one(docs, "Ingress")["spec"]["rules"]
                     for e in rule["http"]["paths"]}
    route_paths = {m["path"]["value"] for rule in one(docs, "HTTPRoute")["spec"]["rules"]
                   for m in rule["matches"]}
    assert ingress_paths == route_paths == provider_paths(docs)
    assert "/webhooks/linear-prod" in ingress_paths and "/webhooks/acme" not in ingress_paths


# --- the HTTPRoute ----------------------------------------------------------------------------

def test_the_httproute_matches_exactly_the_providers_paths_and_targets_the_webhook_port() -> None:
    docs = render(CHART, routed())
    route = one(docs, "HTTPRoute")
    service, port = webhook_port(docs)
    assert route["apiVersion"] == "gateway.networking.k8s.io/v1"
    spec = route["spec"]
    assert spec["parentRefs"] == HTTP_ROUTE["parentRefs"]
    assert spec["hostnames"] == HTTP_ROUTE["hostnames"]
    matches = [m for rule in spec["rules"] for m in rule["matches"]]
    assert sorted(m["path"]["value"] for m in matches) == sorted(provider_paths(docs))
    assert {m["path"]["type"] for m in matches} == {"Exact"}
    assert all(set(m) == {"path"} for m in matches)  # no method or header narrowing
    for rule in spec["rules"]:
        assert rule["backendRefs"] == [{"name": service, "port": port}]
    assert route["metadata"]["annotations"] == HTTP_ROUTE["annotations"]
    assert route["metadata"]["labels"]["exposure"] == "public"
    assert route["metadata"]["labels"]["app.kubernetes.io/instance"] == "shop"


def test_a_path_gateway_api_refuses_is_refused_for_the_httproute_only() -> None:
    values = routed()
    values["providers"]["stripe"]["path"] = "/webhooks/stripe live"
    with pytest.raises(REFUSED) as info:
        render(CHART, values)
    assert "cannot be an HTTPRoute path" in str(info.value)
    values["httpRoute"]["enabled"] = False
    assert len(kinds(render(CHART, values), "Ingress")) == 1


def test_the_httproute_needs_a_parent_gateway() -> None:
    with pytest.raises(REFUSED) as info:
        render(CHART, routed(httpRoute={"enabled": True}))
    assert "httpRoute.parentRefs" in str(info.value)


# --- what cannot be routed is refused at render -----------------------------------------------

@pytest.mark.parametrize("route", ["ingress", "httpRoute"])
def test_sidecar_mode_refuses_a_route_and_says_where_to_put_it(route: str) -> None:
    values = values_of("sidecar", **{route: {**(INGRESS if route == "ingress" else HTTP_ROUTE)}})
    with pytest.raises(REFUSED) as info:
        render(CHART, values)
    message = str(info.value)
    assert f"{route}.enabled needs mode: standalone" in message
    assert "webhook-sidecar.providerPaths" in message


def test_the_docs_sidecar_ingress_routes_the_apps_service_to_the_proxy(tmp_path: Path) -> None:
    """In sidecar mode the app chart routes its own Service. The snippet in docs/kubernetes.md,
    put into the example app chart's Ingress, lists the paths the config serves (the PUBLIC
    template "webhook-sidecar.providerPaths") and reaches the proxy's webhook port."""
    docs_text = (REPO / "docs" / "kubernetes.md").read_text(encoding="utf-8")
    [snippet] = [b for b in re.findall(r"```yaml\n(.*?)```", docs_text, re.S)
                 if "webhook-sidecar.providerPaths" in b]
    chart = build_example(tmp_path)
    (chart / "templates" / "ingress.yaml").write_text(
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: orders}\n"
        "spec:\n  rules:\n  - http:\n" + snippet)
    docs = render(chart, example_values())
    ingress = one(docs, "Ingress")
    kubernetes_validate.validate(ingress, KUBE_VERSIONS[-1], strict=True)
    [rule] = ingress["spec"]["rules"]
    assert {e["path"] for e in rule["http"]["paths"]} == provider_paths(docs)
    service = one(docs, "Service", "-orders")
    pod = pod_of(docs)
    for entry in rule["http"]["paths"]:
        backend = entry["backend"]["service"]
        assert backend["name"] == service["metadata"]["name"]
        port = next(p for p in service["spec"]["ports"] if p["name"] == backend["port"]["name"])
        assert named_port(proxy_container(pod), port["targetPort"]) == port_of(
            config_of(docs)["listen"])


@pytest.mark.parametrize(("path", "reason"), [
    ("${STRIPE_PATH}", "interpolated when the proxy starts"),
    ("/webhooks//stripe", "Kubernetes refuses"),
    ("/webhooks/%2Fstripe", "Kubernetes refuses"),
    ("/webhooks/stripe/..", "Kubernetes refuses"),
])
@pytest.mark.parametrize("route", ["ingress", "httpRoute"])
def test_a_path_a_route_cannot_carry_is_refused(route: str, path: str, reason: str) -> None:
    values = routed(**{"ingress" if route == "httpRoute" else "httpRoute": {"enabled": False}})
    values["providers"]["stripe"]["path"] = path
    with pytest.raises(REFUSED) as info:
        render(CHART, values)
    assert "providers.stripe.path" in str(info.value) and reason in str(info.value)
    values[route]["enabled"] = False  # without a route the chart passes it on to the proxy
    assert config_of(render(CHART, values))["providers"]["stripe"]["path"] == path


# --- trustedProxies ---------------------------------------------------------------------------

def load(docs: list[Manifest], tmp_path: Path) -> Any:
    data, env = materialise(config_of(docs), pod_of(docs), tmp_path)
    return parse_config(data, env=env, base_dir=tmp_path)


def test_trusted_proxies_reach_a_config_the_loader_accepts(tmp_path: Path) -> None:
    networks = ["10.244.0.0/16", "fd00:10:244::/56", "35.191.0.0/16"]
    docs = render(CHART, routed(trustedProxies=networks))
    assert config_of(docs)["trusted_proxies"] == networks
    parsed = load(docs, tmp_path)
    assert parsed.trusted_proxies == tuple(ipaddress.ip_network(n) for n in networks)
    # Also in sidecar mode, where no route is rendered but the controller is still in front.
    sidecar = render(CHART, values_of("sidecar", trustedProxies=networks))
    assert config_of(sidecar)["trusted_proxies"] == networks


@pytest.mark.parametrize("bad", ["ingress-nginx", "10.244.0.0/33", "10.244.0.0/16 "])
def test_a_trusted_proxy_that_is_not_a_cidr_fails_the_render(bad: str) -> None:
    with pytest.raises(REFUSED) as info:
        render(CHART, routed(trustedProxies=["10.0.0.0/8", bad]))
    assert "trustedProxies" in str(info.value)


def test_a_cidr_with_host_bits_renders_but_the_loader_says_what_to_write(
        tmp_path: Path) -> None:
    docs = render(CHART, routed(trustedProxies=["10.244.1.7/16"]))
    with pytest.raises(ConfigError) as info:
        load(docs, tmp_path)
    assert info.value.path == "trusted_proxies[0]"
    assert "10.244.0.0/16" in str(info.value)


def test_trusted_proxies_set_twice_is_refused() -> None:
    values = routed(trustedProxies=["10.244.0.0/16"])
    values["config"] = {**values.get("config", {}), "trusted_proxies": ["10.0.0.0/8"]}
    with pytest.raises(REFUSED) as info:
        render(CHART, values)
    assert "trustedProxies and config.trusted_proxies" in str(info.value)
    del values["trustedProxies"]  # the config key alone still works
    assert config_of(render(CHART, values))["trusted_proxies"] == ["10.0.0.0/8"]


# --- the install notes ------------------------------------------------------------------------

def test_the_notes_print_each_providers_external_url() -> None:
    text = notes(CHART, routed())
    for path in provider_paths(render(CHART, routed())):
        assert f"https://{HOST}{path}  (Ingress)" in text  # the host has a tls entry
        assert f"http://hooks.example.net{path}  (Ingress)" in text  # this one has none
        assert f"https://{HOST}{path}  (HTTPRoute)" in text
    assert "trustedProxies is empty" in text
    assert "trustedProxies is empty" not in notes(CHART, routed(trustedProxies=["10.0.0.0/8"]))


# --- valid Kubernetes, and a valid Gateway API route ------------------------------------------

Validator = Callable[[list[Manifest]], list[str | None]]


@pytest.fixture(scope="session")
def gateway_api() -> Validator:
    """Validates Gateway API objects with the package pinned in tests/deploy/gateway_api/
    (installed there once with ``npm ci``, bounded)."""
    node = node_with(GATEWAY_API_DIR)

    def validate(manifests: list[Manifest]) -> list[str | None]:
        done = subprocess.run([node, str(GATEWAY_API_DIR / "validate.mjs")],
                              input=json.dumps(manifests), capture_output=True, text=True,
                              timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        results: list[str | None] = json.loads(done.stdout)
        return results

    return validate


@pytest.mark.parametrize("version", [claimed_minimum(), KUBE_VERSIONS[-1]])
def test_routed_manifests_validate_against_kubernetes_and_the_gateway_api(
        version: str, gateway_api: Validator) -> None:
    docs = render(CHART, routed(trustedProxies=["10.244.0.0/16"]), kube_version=version,
                  tests=True)
    routes = kinds(docs, "HTTPRoute")
    assert len(routes) == 1 and len(kinds(docs, "Ingress")) == 1
    for doc in docs:
        if doc["apiVersion"] in ("monitoring.coreos.com/v1", "gateway.networking.k8s.io/v1"):
            continue  # CRDs: the prometheus-operator kinds are test_helm_chart's
        kubernetes_validate.validate(doc, version, strict=True)
    assert gateway_api(routes) == [None]
    # The check can fail: a route the Gateway API refuses is reported.
    broken = copy.deepcopy(routes[0])
    broken["spec"]["rules"][0]["backendRefs"][0]["port"] = "webhooks"
    broken["spec"]["rules"][0]["matches"][0]["path"]["type"] = "Glob"
    [message] = gateway_api([broken])
    assert message and "port must be integer" in message and "path/type" in message


def test_the_claimed_minimum_kubernetes_is_the_one_tested(example_chart: Path) -> None:
    """Chart.yaml's kubeVersion is what the chart is validated against: every rendering but the
    native sidecar (>= 1.29, refused at render below that) is valid on the claimed minimum."""
    minimum = claimed_minimum()
    docs = (REPO / "docs" / "kubernetes.md").read_text(encoding="utf-8")
    assert f"Kubernetes {minimum.rpartition('.')[0]} and later" in docs
    renderings = [render(CHART, VALUES[name], kube_version=minimum, tests=True)
                  for name in ("sidecar", "standalone", "realistic")]
    renderings.append(render(example_chart, example_values(), kube_version=minimum))
    for docs in renderings:
        for doc in docs:
            if doc["apiVersion"] != "monitoring.coreos.com/v1":
                kubernetes_validate.validate(doc, minimum, strict=True)
    report = helm.lint(CHART, routed(), strict=True, kube_version=f"v{minimum}")
    assert report["errors"] == [] and report["messages"] == [], report


def test_the_docs_values_render_what_the_docs_say() -> None:
    """The values shown in docs/kubernetes.md, "Reaching the proxy from outside", render."""
    docs = (REPO / "docs" / "kubernetes.md").read_text(encoding="utf-8")
    section = docs.split("\n## Reaching the proxy from outside\n", 1)[1].split("\n## ", 1)[0]
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", section, re.S)
              if "{{" not in b]
    shown = {key: block for block in blocks for key in ("ingress", "httpRoute") if key in block}
    assert set(shown) == {"ingress", "httpRoute"}
    for key, block in shown.items():
        rendered = render(CHART, values_of("realistic", **block))
        assert len(kinds(rendered, "Ingress" if key == "ingress" else "HTTPRoute")) == 1
        assert config_of(rendered)["trusted_proxies"] == block["trustedProxies"]
    network_policy = next(b for b in blocks if "networkPolicy" in b)
    policy = one(render(CHART, values_of("realistic", **network_policy)), "NetworkPolicy")
    assert network_policy["networkPolicy"]["webhookFrom"][0] in policy["spec"]["ingress"][0]["from"]
