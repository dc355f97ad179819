"""A provider's own ``upstream`` block: each key it sets replaces the top level's, the others are
inherited; the checks that compare with the upstream timeout use the provider's; the keyring
signs each provider's forwards with its upstream's secrets; providers with the same upstream
share one client."""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from sidecar.config.keyring import Keyring
from sidecar.config.loader import Secrets, parse_config
from sidecar.config.model import Config, UpstreamConfig
from sidecar.config.problems import ConfigProblems
from sidecar.forwarding.upstream import Upstreams
from sidecar.obs.metrics import Metrics
from sidecar.ops.maintenance import Maintenance
from sidecar.runtime.testing import MemoryStore

TOP_SIGNING = "whsec_" + base64.b64encode(bytes(range(32))).decode()
OWN_SIGNING = "whsec_" + base64.b64encode(bytes(range(32, 64))).decode()


def config(top: dict[str, Any] | None = None, **upstreams: Any) -> dict[str, Any]:
    """Stripe and GitHub (lease 60s), each with the upstream block given for it, if any."""
    data: dict[str, Any] = {"providers": {
        "stripe": {"path": "/s", "preset": "stripe", "secrets": ["whsec_x"], "lease": "60s"},
        "github": {"path": "/g", "preset": "github", "secrets": ["x"], "lease": "60s"},
    }}
    if top is not None:
        data["upstream"] = top
    for key, block in upstreams.items():
        data["providers"][key]["upstream"] = copy.deepcopy(block)
    return data


def load(data: dict[str, Any], secrets: Secrets = Secrets.ALL) -> Config:
    return parse_config(data, env={}, secrets=secrets)


def upstream_of(loaded: Config, key: str) -> UpstreamConfig:
    provider = loaded.provider(key)
    assert provider is not None
    return provider.upstream


def messages(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigProblems) as caught:
        load(data)
    return [f"{p.path}: {p.message}" for p in caught.value.problems]


def test_each_key_given_replaces_the_top_levels_and_the_rest_is_inherited() -> None:
    loaded = load(config({"url": "http://app:3000", "timeout": "5s", "max_connections": 7,
                          "signing_secrets": [TOP_SIGNING]},
                         stripe={"url": "http://orders:8000/base/", "timeout": "20s",
                                 "signing_secrets": [OWN_SIGNING]}))
    stripe, github = upstream_of(loaded, "stripe"), upstream_of(loaded, "github")
    assert (stripe.url, stripe.timeout, stripe.max_connections) == (
        "http://orders:8000/base", 20.0, 7)
    assert [s.source for s in stripe.signing_secrets] == ["inline"]
    assert stripe.signing_secrets != github.signing_secrets
    assert github == loaded.upstream  # no block: the top level's, whole


@pytest.mark.parametrize("block", [None, {}])
def test_an_empty_block_inherits_everything(block: object) -> None:
    loaded = load(config({"url": "http://app:3000", "timeout": "5s"}, stripe=block))
    assert upstream_of(loaded, "stripe") == loaded.upstream


def test_an_empty_list_of_signing_secrets_is_given_not_inherited() -> None:
    loaded = load(config({"url": "http://app", "signing_secrets": [TOP_SIGNING]},
                         stripe={"signing_secrets": []}))
    assert upstream_of(loaded, "stripe").signing_secrets == ()
    assert len(upstream_of(loaded, "github").signing_secrets) == 1


def test_the_top_level_url_is_optional_when_every_provider_has_its_own() -> None:
    loaded = load(config(None, stripe={"url": "http://orders"}, github={"url": "http://repos"}))
    assert loaded.upstream.url is None
    assert [p.upstream.url for p in loaded.providers] == ["http://orders", "http://repos"]
    assert loaded.upstream.timeout == upstream_of(loaded, "github").timeout == 10.0


def test_a_provider_without_any_upstream_is_named() -> None:
    assert messages(config({"timeout": "5s"}, stripe={"url": "http://orders"})) == [
        "providers.github.upstream.url: is required: this provider has no upstream (neither "
        "its own upstream.url nor a top-level upstream.url); set one of them"]


def test_a_wrong_key_in_a_providers_upstream_is_reported_with_its_path() -> None:
    found = messages(config({"url": "http://app"}, stripe={"url": "ftp://x", "timout": "1s"}))
    assert [m.split(":")[0] for m in found] == ["providers.stripe.upstream.url",
                                                "providers.stripe.upstream.timout"]


def test_the_lease_is_checked_against_the_providers_own_timeout() -> None:
    # Stripe's own 70s is over its lease; GitHub's 60s lease only needs the top level's 10s.
    assert messages(config({"url": "http://app"}, stripe={"timeout": "70s"})) == [
        "providers.stripe.lease: must exceed providers.stripe.upstream.timeout (70s; the "
        "lease is 1m), or a slow but live first attempt would be taken over; to fix, raise "
        "providers.stripe.lease (default 60s) or lower providers.stripe.upstream.timeout"]
    # A provider's lower timeout lets it have a lease below the top level's timeout.
    data = config({"url": "http://app", "timeout": "90s"}, stripe={"timeout": "5s"})
    data["providers"]["stripe"]["lease"] = "30s"
    data["providers"]["github"]["lease"] = "100s"
    assert upstream_of(load(data), "stripe").timeout == 5.0
    data["providers"]["github"]["lease"] = "80s"
    assert [m.split(":")[0] for m in messages(data)] == ["providers.github.lease"]


def test_a_batch_providers_lease_counts_its_own_timeout_and_the_wait() -> None:
    data = config({"url": "http://app"})
    data["providers"] = {"sendgrid": {
        "path": "/sg", "preset": "sendgrid", "lease": "10s", "inflight_wait": "2s",
        "secrets": ["MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE83T4O/n84iotIvIW4mdBgQ/7dAfSmpqIM8kF9mN1"
                    "flpVKS3GRqe62gw+2fNNRaINXvVpiglSI8eNEc6wEA3F+g=="],
        "upstream": {"timeout": "9s"}}}
    [found] = messages(data)
    assert found.startswith("providers.sendgrid.lease: must exceed "
                            "providers.sendgrid.upstream.timeout + inflight_wait (9s + 2s")


def test_the_queue_lease_warning_names_the_providers_own_timeout() -> None:
    data = config({"url": "http://app"}, stripe={"timeout": "58s"})
    data["providers"]["stripe"]["mode"] = "queue"
    [warning] = [w for w in load(data).warnings if "lease" in w]
    assert "shorter than providers.stripe.upstream.timeout + store.statement_timeout" in warning


def test_a_providers_own_signing_secrets_sign_its_forwards(tmp_path: Path) -> None:
    rotated = tmp_path / "own.secret"
    rotated.write_text(OWN_SIGNING + "\n")
    loaded = load(config({"url": "http://app", "signing_secrets": [TOP_SIGNING]},
                         stripe={"signing_secrets": [{"file": str(rotated)}]}))
    keyring = Keyring(loaded.providers, loaded.upstream.signing_secrets)
    top = base64.b64decode(TOP_SIGNING.removeprefix("whsec_"))
    own = base64.b64decode(OWN_SIGNING.removeprefix("whsec_"))
    assert keyring.signing_keys("github") == keyring.signing_keys() == (top,)
    assert keyring.signing_keys("stripe") == (own,)
    assert keyring.watches_files

    rotated.write_text(TOP_SIGNING)  # rotated in place, as a Secret volume is
    assert keyring.reload().changed == ("providers.stripe.upstream.signing_secrets",)
    assert keyring.signing_keys("stripe") == (top,)


def test_a_store_command_reads_no_providers_signing_secrets() -> None:
    data = config({"url": "http://app"}, stripe={"signing_secrets": [{"env": "UNSET"}]})
    loaded = load(data, Secrets.NONE)
    assert upstream_of(loaded, "stripe").signing_secrets == ()
    assert "providers.<key>.upstream.signing_secrets" in loaded.unread_secrets
    with pytest.raises(ConfigProblems) as caught:  # a re-drive signs: it reads them
        load(data, Secrets.SIGNING)
    assert [p.path for p in caught.value.problems] == [
        "providers.stripe.upstream.signing_secrets[0].env"]


def test_providers_with_the_same_upstream_share_one_client() -> None:
    loaded = load(config({"url": "http://app"}, stripe={"url": "http://orders"}))
    loaded_same = load(config({"url": "http://app"}, stripe={"url": "http://app"}))
    apart, together = Upstreams(loaded.providers), Upstreams(loaded_same.providers)
    assert apart["stripe"] is not apart["github"]
    assert together["stripe"] is together["github"]
    assert list(apart) == ["stripe", "github"] and len(apart) == 2


@pytest.mark.parametrize(("url", "origin"), [
    ("http://app", "http://app:80"),
    ("HTTPS://user:pw@App.example/base?q=1", "https://app.example:443"),
    ("http://[::1]:8080/x", "http://[::1]:8080"),
])
def test_metrics_and_logs_name_an_upstream_by_its_origin(url: str, origin: str) -> None:
    assert UpstreamConfig(url, 1.0, 1.0, 1, 1.0, 1, ()).origin == origin


def test_output_never_shows_the_credentials_in_an_upstream_url() -> None:
    shown = UpstreamConfig("https://user:pw@app/x", 1.0, 1.0, 1, 1.0, 1, ()).redacted_url
    assert shown == "https://***@app/x"


def test_a_reload_of_a_providers_own_signing_secrets_is_counted_under_their_key_path(
        tmp_path: Path) -> None:
    secret = tmp_path / "own.secret"
    secret.write_text(OWN_SIGNING)
    loaded = load(config({"url": "http://app"},
                         stripe={"signing_secrets": [{"file": str(secret)}]}))
    metrics = Metrics(CollectorRegistry())
    upkeep = Maintenance(loaded, MemoryStore(), metrics, Keyring(loaded.providers))
    own = "providers.stripe.upstream.signing_secrets"
    secret.write_text(TOP_SIGNING)
    assert upkeep.reload_secrets() == (own,)
    secret.write_text("not a whsec secret")
    assert upkeep.reload_secrets() == ()
    reloads = metrics.registry.get_sample_value
    assert reloads("webhook_secret_reloads_total", {"provider": own, "result": "applied"}) == 1
    assert reloads("webhook_secret_reloads_total", {"provider": own, "result": "error"}) == 1
