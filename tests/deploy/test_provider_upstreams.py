"""The chart in standalone mode in front of two apps: a provider's ``upstream`` block in values
reaches the rendered config as it is, passes the config schema, and loads with the real loader;
the providers without one use standalone.upstreamUrl and the chart's forward signing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import helm_python as helm
import jsonschema
import pytest

from sidecar.config.loader import parse_config
from sidecar.config.schema import SCHEMA_FILE
from sidecar.core.errors import ConfigError
from tests.deploy.chart_support import (
    CHART,
    REPO,
    config_of,
    materialise,
    pod_of,
    render,
    values_of,
)

REPOS = "http://repos.shop.svc.cluster.local:8080"


def two_apps(**github_upstream: Any) -> dict[str, Any]:
    """The standalone values, GitHub sent to its own app; Stripe to standalone.upstreamUrl."""
    values = values_of("standalone")
    values["providers"]["github"]["upstream"] = {"url": REPOS, **github_upstream}
    values["providers"]["stripe"] = {
        "path": "/webhooks/stripe", "preset": "stripe",
        "secrets": [{"secretKeyRef": {"name": "stripe-webhook", "key": "signing-secret"}}]}
    return values


def test_a_providers_own_upstream_reaches_the_config_and_loads(tmp_path: Path) -> None:
    values = two_apps(timeout="20s")
    docs = render(CHART, values)
    config = config_of(docs)
    assert config["providers"]["github"]["upstream"] == {"url": REPOS, "timeout": "20s"}
    assert "upstream" not in config["providers"]["stripe"]
    jsonschema.validate(config, json.loads((REPO / SCHEMA_FILE).read_text()),
                        cls=jsonschema.Draft202012Validator)

    data, env = materialise(config, pod_of(docs), tmp_path)
    parsed = parse_config(data, env=env, base_dir=tmp_path)
    github, stripe = parsed.provider("github"), parsed.provider("stripe")
    assert github is not None and stripe is not None
    assert (github.upstream.url, github.upstream.timeout) == (REPOS, 20.0)
    assert stripe.upstream.url == values["standalone"]["upstreamUrl"]
    # Both signed with the chart's forward-signing secret: inherited from the top level.
    assert github.upstream.signing_secrets == stripe.upstream.signing_secrets != ()


def test_a_wrong_provider_upstream_is_refused_when_rendering() -> None:
    with pytest.raises((helm.HelmValuesError, helm.HelmRenderError)) as info:
        render(CHART, two_apps(url="ftp://repos"))
    assert "/providers/github/upstream/url" in str(info.value)


def _stripe_and_github(top: dict[str, Any] | None, **upstreams: Any) -> dict[str, Any]:
    config: dict[str, Any] = {"providers": {
        "stripe": {"path": "/s", "preset": "stripe", "secrets": ["whsec_x"]},
        "github": {"path": "/g", "preset": "github", "secrets": ["x"]},
    }}
    if top is not None:
        config["upstream"] = top
    for key, block in upstreams.items():
        config["providers"][key]["upstream"] = block
    return config


def _schema_accepts(config: dict[str, Any]) -> bool:
    schema = json.loads((REPO / SCHEMA_FILE).read_text())
    return jsonschema.Draft202012Validator(schema).is_valid(config)


def _loader_accepts(config: dict[str, Any]) -> bool:
    try:
        parse_config(config, env={})
    except ConfigError:
        return False
    return True


@pytest.mark.parametrize(("config", "schema", "loader"), [
    pytest.param(_stripe_and_github(None, stripe={"url": "http://o"}, github={"url": "http://r"}),
                 True, True, id="every-provider-its-own-no-top-level"),
    pytest.param(_stripe_and_github({"url": "http://a"}, github={"timeout": "5s"}),
                 True, True, id="top-level-url-one-key-overridden"),
    pytest.param(_stripe_and_github(None, stripe={"url": "http://o"}),
                 False, False, id="a-provider-without-any-url"),
    pytest.param(_stripe_and_github({"timeout": "5s"}, stripe={"url": "http://o"},
                                    github={"timeout": "3s"}),
                 False, False, id="top-level-block-without-url"),
    pytest.param(_stripe_and_github({"url": "http://a"}, github={"url": None}),
                 True, True, id="null-url-inherits"),
    pytest.param(_stripe_and_github({"url": "http://a"}, github={"max_connections": 0}),
                 False, False, id="bad-value-in-a-providers-upstream"),
    # Loader only: the lease against the provider's own timeout.
    pytest.param(_stripe_and_github({"url": "http://a"}, github={"timeout": "90s"}),
                 True, False, id="own-timeout-over-the-lease"),
])
def test_the_schema_and_the_loader_agree_on_provider_upstreams(
        config: dict[str, Any], schema: bool, loader: bool) -> None:
    assert (_schema_accepts(config), _loader_accepts(config)) == (schema, loader)


def test_standalone_needs_no_upstream_url_when_every_provider_has_its_own(tmp_path: Path) -> None:
    values = two_apps()
    values["standalone"]["upstreamUrl"] = ""
    with pytest.raises((helm.HelmValuesError, helm.HelmRenderError)):
        render(CHART, values)  # stripe has no app of its own
    values["providers"]["stripe"]["upstream"] = {"url": "http://orders.shop.svc:8080"}
    docs = render(CHART, values)
    config = config_of(docs)
    assert "url" not in config["upstream"] and config["upstream"]["signing_secrets"]
    data, env = materialise(config, pod_of(docs), tmp_path)
    parsed = parse_config(data, env=env, base_dir=tmp_path)
    assert {p.key: p.upstream.url for p in parsed.providers} == {
        "github": REPOS, "stripe": "http://orders.shop.svc:8080"}
