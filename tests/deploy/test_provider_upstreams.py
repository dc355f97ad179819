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
