"""Monitoring shipped with the chart: every alert's PromQL parses, uses only series and labels
the proxy exports (or Prometheus's own `up`), is scoped to the release's namespace and jobs and
links a runbook section that exists in docs/operations.md; the Grafana dashboard's queries parse
and use only exported series; the dashboard ConfigMap and the PodMonitor render as configured."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import jsonschema
import promql_parser
import pytest

from sidecar.core.answers import RULES, Result
from sidecar.core.durations import parse_duration
from tests.deploy.chart_support import (
    CHART,
    REPO,
    VALUES,
    Manifest,
    example_values,
    metric_labels,
    one,
    pod_of,
    proxy_container,
    render,
    values_of,
)
from tests.deploy.test_helm_chart import MONITORING_SUBSETS

DASHBOARD = CHART / "dashboards" / "webhook-sidecar.json"
OPERATIONS = REPO / "docs" / "operations.md"
# Prometheus's own series: the scrape health of each target.
PROMETHEUS_SERIES = {"up": {"namespace", "job", "instance", "pod", "container", "service"}}
TARGET_LABELS = {"namespace", "job", "instance", "pod", "container", "service"}
ALERTS = {
    "WebhookSidecarDown": "warning", "WebhookSidecarAbsent": "critical",
    "WebhookSidecarEventsStuck": "warning", "WebhookSidecarSignatureFailures": "warning",
    "WebhookSidecarAppFailures": "warning", "WebhookSidecarStoreErrors": "critical",
    "WebhookSidecarSecretReloadFailures": "warning", "WebhookSidecarPayloadMismatches": "info",
    "WebhookSidecarQueueAge": "warning", "WebhookSidecarDeadLetters": "warning",
    "WebhookSidecarPartitionsNotAhead": "warning",
}
# Every result whose refusal is a 401: what the signature alert and panel must count, read from
# the code so that a new 401 refusal cannot be left out of them.
REFUSED_401 = {rule.result.value for rule in RULES.values() if rule.status == 401}


def selectors(node: Any) -> list[Any]:
    """Every VectorSelector in a parsed PromQL expression."""
    if isinstance(node, promql_parser.VectorSelector):
        return [node]
    if isinstance(node, promql_parser.MatrixSelector):
        return [node.vector_selector]
    found = []
    for attr in ("lhs", "rhs", "expr", "param"):
        child = getattr(node, attr, None)
        if isinstance(child, promql_parser.Expr):
            found += selectors(child)
    for arg in getattr(node, "args", None) or []:
        found += selectors(arg)
    return found


def check_promql(expr: str) -> list[Any]:
    """Parse ``expr``; every series it reads is exported, with labels that series has."""
    parsed = promql_parser.parse(expr)
    known = metric_labels()
    found = selectors(parsed)
    assert found, expr
    for selector in found:
        name = selector.name
        assert name in known or name in PROMETHEUS_SERIES, f"{name} is not an exported series"
        labels = known.get(name, set()) | PROMETHEUS_SERIES.get(name, set()) | TARGET_LABELS
        for matcher in selector.matchers.matchers:
            assert matcher.name in labels, f"{name} has no label {matcher.name}"
    return found


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown file."""
    anchors = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *$", markdown, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


def rules(docs: list[Manifest]) -> dict[str, Manifest]:
    rule = one(docs, "PrometheusRule")
    return {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}


@pytest.fixture(scope="module")
def alert_sets(example_chart: Path) -> dict[str, dict[str, Manifest]]:
    return {"realistic": rules(render(CHART, VALUES["realistic"])),
            "example": rules(render(example_chart, example_values()))}


@pytest.mark.parametrize("name", ["realistic", "example"])
def test_alerts_parse_use_exported_series_and_are_scoped_to_the_release(
        name: str, alert_sets: dict[str, dict[str, Manifest]]) -> None:
    alerts = alert_sets[name]
    assert {a: r["labels"]["severity"] for a, r in alerts.items()} == ALERTS
    for alert in alerts.values():
        for selector in check_promql(alert["expr"]):
            matchers = {(m.name, str(m.op)) : m.value for m in selector.matchers.matchers}
            assert matchers[("namespace", "MatchOp.Equal")] == "shop", alert["alert"]
            assert matchers[("job", "MatchOp.Re")] == (
                "shop-webhook-sidecar-metrics|shop/shop-webhook-sidecar"), alert["alert"]
        parse_duration(alert["for"], "for")


def test_each_alert_watches_what_it_says(alert_sets: dict[str, dict[str, Manifest]]) -> None:
    alerts = alert_sets["realistic"]
    assert alerts["WebhookSidecarDown"]["expr"].startswith("up{")
    assert alerts["WebhookSidecarAbsent"]["expr"].startswith("absent(up{")
    assert "webhook_events_stuck" in alerts["WebhookSidecarEventsStuck"]["expr"]
    assert 'status_class!="2xx"' in alerts["WebhookSidecarAppFailures"]["expr"]
    store = alerts["WebhookSidecarStoreErrors"]["expr"]
    assert 'result="store_error"' in store
    # Maintenance errors page only when repeated: an increase over a window, at least N.
    assert re.search(r"increase\(webhook_maintenance_errors_total\{[^}]*\}\[30m\]\)\) >= 3",
                     store), store
    assert 'result="error"' in alerts["WebhookSidecarSecretReloadFailures"]["expr"]
    assert "webhook_payload_mismatches_total" in alerts["WebhookSidecarPayloadMismatches"]["expr"]
    # Queue mode: every process reports the table-wide gauges, so max (never sum) over them.
    assert re.fullmatch(r"max by \(namespace, job, provider\) "
                        r"\(webhook_queue_oldest_age_seconds\{[^}]*\}\) > 900",
                        alerts["WebhookSidecarQueueAge"]["expr"])
    dead = alerts["WebhookSidecarDeadLetters"]["expr"]
    assert re.search(r"increase\(webhook_dead_lettered_total\{[^}]*\}\[15m\]\)\) > 0", dead)
    assert re.search(r"max by \(namespace, job, provider\) \(webhook_queue_dead\{[^}]*\}\) > 0",
                     dead)


def results_selected(expr: str) -> list[set[str]]:
    """For each ``webhook_events_total`` selector of ``expr`` with a ``result`` matcher: the
    results it selects (a regex matcher is anchored, as in Prometheus)."""
    found = []
    for selector in selectors(promql_parser.parse(expr)):
        for matcher in selector.matchers.matchers:
            if selector.name == "webhook_events_total" and matcher.name == "result":
                op = str(matcher.op)
                assert op in ("MatchOp.Equal", "MatchOp.Re"), (expr, op)
                found.append({r.value for r in Result
                              if (r.value == matcher.value if op == "MatchOp.Equal"
                                  else re.fullmatch(matcher.value, r.value))})
    return found


def test_the_signature_alert_and_panel_count_every_401_refusal(
        alert_sets: dict[str, dict[str, Manifest]]) -> None:
    """invalid_signature and replayed_body (a signed body resent under a fresh event id: the
    attack the replay guard exists for) page alike."""
    assert {"invalid_signature", "replayed_body"} <= REFUSED_401
    alert = results_selected(alert_sets["realistic"]["WebhookSidecarSignatureFailures"]["expr"])
    assert alert and all(selected == REFUSED_401 for selected in alert), alert
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    [panel] = [p for p in dashboard["panels"] if p["title"].startswith("Signature failures")]
    shown = [s for t in panel["targets"] for s in results_selected(substitute(t["expr"]))]
    assert shown and all(selected == REFUSED_401 for selected in shown), shown


def test_queue_alerts_are_configurable() -> None:
    values = values_of("realistic")
    values["metrics"]["prometheusRule"].update({
        "queueAge": {"maxAgeSeconds": 3600, "for": "10m"},
        "deadLetters": {"whileAnyDead": False, "for": "2m"}})
    alerts = rules(render(CHART, values))
    assert alerts["WebhookSidecarQueueAge"]["expr"].endswith(") > 3600")
    assert alerts["WebhookSidecarQueueAge"]["for"] == "10m"
    dead = alerts["WebhookSidecarDeadLetters"]
    # Only events that died recently: dead events kept for inspection no longer fire it.
    assert "webhook_queue_dead" not in dead["expr"] and dead["for"] == "2m"
    check_promql(dead["expr"])


@pytest.mark.parametrize(("interval", "min_seconds", "threshold"), [
    (None, None, "0"),        # no interval in the chart's config: once rows land in DEFAULT
    ("1d", None, "86400"),    # one interval of the config's
    ("90m", None, "5400"),
    (3600, None, "3600"),     # a number of seconds
    ("${INTERVAL}", None, "0"),
    ("1d", 7200, "7200"),     # as the value says
])
def test_the_partitions_alert_fires_below_one_interval_ahead(
        interval: str | int | None, min_seconds: int | None, threshold: str) -> None:
    values = values_of("realistic")
    if interval is not None:
        values.setdefault("config", {}).setdefault("store", {})["partitioning"] = {
            "interval": interval}
    if min_seconds is not None:
        values["metrics"]["prometheusRule"]["partitionsAhead"] = {"minSeconds": min_seconds}
    expr = rules(render(CHART, values))["WebhookSidecarPartitionsNotAhead"]["expr"]
    # Every process reports the table-wide bound as of its last round: max, never sum; minus
    # time(), so that the lead falls while no round sets the gauge (maintenance failing).
    assert re.fullmatch(r"max by \(namespace, job, table\) "
                        r"\(webhook_partitions_last_bound_timestamp_seconds\{[^}]*\}\) "
                        r"- time\(\) < " + threshold, expr)
    check_promql(expr)
    # As Prometheus reads it: (max(…) - time()) < threshold, the lead compared, not the bound.
    parsed = promql_parser.parse(expr)
    assert isinstance(parsed, promql_parser.BinaryExpr) and str(parsed.op) == "<", expr
    assert parsed.rhs.val == float(threshold)
    lead = parsed.lhs
    assert isinstance(lead, promql_parser.BinaryExpr) and str(lead.op) == "-", expr
    assert isinstance(lead.lhs, promql_parser.AggregateExpr), expr
    assert isinstance(lead.rhs, promql_parser.Call) and lead.rhs.func.name == "time", expr


def test_every_alert_links_a_runbook_section_that_exists(
        alert_sets: dict[str, dict[str, Manifest]]) -> None:
    anchors = github_anchors(OPERATIONS.read_text(encoding="utf-8"))
    for alert in alert_sets["realistic"].values():
        url = urlparse(alert["annotations"]["runbook_url"])
        assert url.scheme == "https" and url.path.endswith("/docs/operations.md"), url
        assert url.fragment in anchors, f"{alert['alert']}: no section #{url.fragment}"
        assert alert["annotations"]["summary"] and alert["annotations"]["description"]


def test_alert_job_scope_is_configurable() -> None:
    values = values_of("realistic")
    values["metrics"]["prometheusRule"]["jobRegex"] = "webhooks|payments/webhooks"
    for alert in rules(render(CHART, values)).values():
        for selector in check_promql(alert["expr"]):
            jobs = [m.value for m in selector.matchers.matchers if m.name == "job"]
            assert jobs == ["webhooks|payments/webhooks"]


def test_the_default_job_scope_matches_the_charts_own_monitors(example_chart: Path) -> None:
    """ServiceMonitor targets get job=<Service name>; PodMonitor targets job=<ns>/<name>."""
    docs = render(example_chart, example_values())
    job = re.compile(next(iter(
        m.value for s in check_promql(rules(docs)["WebhookSidecarDown"]["expr"])
        for m in s.matchers.matchers if m.name == "job")))
    assert job.fullmatch(one(docs, "Service", "-metrics")["metadata"]["name"])
    values = example_values()
    values["webhookSidecar"]["metrics"]["podMonitor"] = {"enabled": True}
    monitor = one(render(example_chart, values), "PodMonitor")
    assert job.fullmatch(f"shop/{monitor['metadata']['name']}")  # the release namespace


# --- the Grafana dashboard -----------------------------------------------------------------

GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h",
                     "$namespace": ".*", "$job": ".*", "$provider": ".*"}


def dashboard_queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            out.append((panel["title"], target["expr"]))
    return out


def substitute(expr: str) -> str:
    for name in sorted(GRAFANA_VARIABLES, key=len, reverse=True):
        expr = expr.replace(name, GRAFANA_VARIABLES[name])
    assert "$" not in expr, expr
    return expr


def test_the_dashboard_queries_parse_and_use_exported_series() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    queries = dashboard_queries(dashboard)
    assert len(queries) >= 15
    used: set[str] = set()
    for title, expr in queries:
        for selector in check_promql(substitute(expr)):
            used.add(selector.name)
            names = {m.name for m in selector.matchers.matchers}
            assert {"namespace", "job"} <= names, (title, expr)
    # What the issue asks the dashboard to show, by the real series names.
    for series in ("webhook_events_total", "webhook_app_answers_total",
                   "webhook_claim_latency_seconds_bucket",
                   "webhook_upstream_latency_seconds_bucket", "webhook_events_stuck",
                   "webhook_maintenance_errors_total", "webhook_secret_reloads_total",
                   "webhook_queue_depth", "webhook_queue_oldest_age_seconds",
                   "webhook_queue_attempts_total", "webhook_queue_dead",
                   "webhook_dead_lettered_total", "webhook_delivery_duration_seconds_bucket",
                   "webhook_store_batch_size_bucket", "webhook_store_batch_size_sum"):
        assert series in used, series
    exprs = " ".join(expr for _, expr in queries)
    assert 'result="duplicate"' in exprs and 'result="store_error"' in exprs
    # Template variables: data source, namespace, job, provider; each query variable parses.
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert set(variables) == {"datasource", "namespace", "job", "provider"}
    for name in ("namespace", "job", "provider"):
        inner = re.fullmatch(r"label_values\((.*), *(\w+)\)", variables[name]["query"]["query"])
        assert inner and inner.group(2) == name
        check_promql(substitute(inner.group(1)))
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert panel["description"]


def test_the_total_panel_is_quantiles_of_the_end_to_end_histogram() -> None:
    """Issue 20: the "total" latency panel reads the delivery's own duration (first byte in to
    last byte out), not a sum of the parts the proxy happens to time."""
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    [panel] = [p for p in dashboard["panels"] if p["title"].lower().startswith("total")]
    quantiles = []
    for target in panel["targets"]:
        parsed = promql_parser.parse(substitute(target["expr"]))
        assert isinstance(parsed, promql_parser.Call), target["expr"]
        assert parsed.func.name == "histogram_quantile", target["expr"]
        quantiles.append(parsed.args[0].val)
        [selector] = selectors(parsed)
        assert selector.name == "webhook_delivery_duration_seconds_bucket", target["expr"]
    assert {0.5, 0.9, 0.99} <= set(quantiles)
    assert panel["fieldConfig"]["defaults"]["unit"] == "s"
    assert "webhook_delivery_duration_seconds" in panel["description"]


def test_the_dashboard_configmap(example_chart: Path) -> None:
    assert not [d for d in render(CHART, VALUES["standalone"])
                if d["metadata"]["name"].endswith("-dashboard")]
    values = values_of("realistic", grafanaDashboard={
        "enabled": True, "namespace": "monitoring", "annotations": {"grafana_folder": "Webhooks"}})
    docs = render(CHART, values)
    configmap = one(docs, "ConfigMap", "-dashboard")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert configmap["metadata"]["namespace"] == "monitoring"
    assert configmap["metadata"]["annotations"] == {"grafana_folder": "Webhooks"}
    assert json.loads(configmap["data"]["webhook-sidecar.json"]) == json.loads(
        DASHBOARD.read_text(encoding="utf-8"))
    # In sidecar mode the dependency ships it too.
    values = example_values()
    values["webhookSidecar"]["grafanaDashboard"] = {"enabled": True}
    configmap = one(render(example_chart, values), "ConfigMap", "-dashboard")
    assert configmap["metadata"]["namespace"] == "shop"
    assert json.loads(configmap["data"]["webhook-sidecar.json"])["uid"] == "webhook-sidecar"


def test_a_pod_monitor_scrapes_the_sidecars_admin_port(example_chart: Path) -> None:
    values = example_values()
    values["webhookSidecar"]["metrics"] = {"podMonitor": {"enabled": True,
                                                          "labels": {"release": "kps"}},
                                           "serviceMonitor": {"enabled": False}}
    docs = render(example_chart, values)
    monitor = one(docs, "PodMonitor")
    jsonschema.validate(monitor, MONITORING_SUBSETS["PodMonitor"])
    assert monitor["metadata"]["labels"]["release"] == "kps"
    template = one(docs, "Deployment")["spec"]["template"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= (
        template["metadata"]["labels"].items())
    endpoint = monitor["spec"]["podMetricsEndpoints"][0]
    assert endpoint["path"] == "/metrics"
    assert endpoint["port"] in {p["name"] for p in proxy_container(template["spec"])["ports"]}
    assert not [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"].endswith(
        "-metrics")]
    # Standalone: the chart's own pods.
    docs = render(CHART, values_of("standalone", metrics={"podMonitor": {"enabled": True}}))
    assert one(docs, "PodMonitor")["spec"]["selector"]["matchLabels"] == one(
        docs, "Deployment")["spec"]["selector"]["matchLabels"]
    assert pod_of(docs)


def test_a_pod_monitor_in_sidecar_mode_needs_the_pod_selector() -> None:
    import helm_python as helm
    with pytest.raises((helm.HelmValuesError, helm.HelmRenderError)) as info:
        render(CHART, values_of("sidecar", metrics={"podMonitor": {"enabled": True}}))
    assert "sidecar.podSelector" in str(info.value)
