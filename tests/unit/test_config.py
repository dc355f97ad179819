"""The config loader: strict validation with key paths, interpolation, secrets, presets."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import pytest

from sidecar.config.blocks import BLOCKS
from sidecar.config.declarations import (
    NO_DEFAULT,
    Block,
    Nested,
    block,
    block_of,
    fieldless,
    group,
    nested,
    setting,
)
from sidecar.config.interpolate import interpolate
from sidecar.config.kinds import Duration, Integer
from sidecar.config.loader import Secrets, load_config_file, parse_config
from sidecar.config.model import LogFormat, LogLevel, PayloadMismatch, StoreKind
from sidecar.config.problems import ConfigProblems
from sidecar.core.durations import format_duration, parse_duration
from sidecar.core.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def minimal(**provider: Any) -> dict[str, Any]:
    return {
        "upstream": {"url": "http://127.0.0.1:3000"},
        "providers": {"stripe": {"path": "/webhooks/stripe", "preset": "stripe",
                                 "secrets": ["whsec_abc"], **provider}},
    }


def error_path(data: object, env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(data, env=env or {})
    return info.value.path


@pytest.mark.parametrize(("listen", "host", "shown"), [
    ("[::1]:8080", "::1", "[::1]:8080"), ("[::]:0", "::", "[::]:0"),
    ("127.0.0.1:8080", "127.0.0.1", "127.0.0.1:8080"),
    ("localhost:80", "localhost", "localhost:80"),
])
def test_an_address_is_shown_as_it_is_written(listen: str, host: str, shown: str) -> None:
    config = parse_config({**minimal(), "listen": listen}, env={})
    assert config.listen.host == host
    assert str(config.listen) == shown  # an IPv6 host in brackets, as a URL needs it
    assert parse_config({**minimal(), "listen": shown}, env={}).listen == config.listen


def test_minimal_config_takes_defaults_and_preset() -> None:
    config = parse_config(minimal(), env={})
    assert str(config.listen) == "0.0.0.0:8080"
    assert str(config.admin_listen) == "127.0.0.1:9090"
    assert config.store.kind == "sqlite"
    assert config.upstream.timeout == 10.0
    stripe = config.providers[0]
    assert stripe.key == "stripe" and stripe.preset == "stripe"
    assert stripe.key_bytes == (b"whsec_abc",)  # Stripe's secret is used verbatim
    assert stripe.retention == 30 * 86400
    assert stripe.final_statuses == frozenset(), "by default only a 2xx ends an event done"
    assert any("one host" in w for w in config.warnings)


@pytest.mark.parametrize(("mutate", "path"), [
    (lambda d: d.update(unknown=1), "unknown"),
    (lambda d: d["upstream"].update(timout="1s"), "upstream.timout"),
    (lambda d: d["upstream"].update(url="ftp://x"), "upstream.url"),
    (lambda d: d["upstream"].update(timeout="ten seconds"), "upstream.timeout"),
    (lambda d: d.update(listen="8080"), "listen"),
    (lambda d: d.update(admin_listen="0.0.0.0:8080"), "admin_listen"),
    (lambda d: d.update(max_body_bytes="lots"), "max_body_bytes"),
    (lambda d: d.update(store={"url": "mysql://x"}), "store.url"),
    (lambda d: d.update(providers={}), "providers"),
    (lambda d: d["providers"]["stripe"].update(lease="5s"), "providers.stripe.lease"),
    (lambda d: d["providers"]["stripe"].update(inflight_wait="2m"),
     "providers.stripe.inflight_wait"),
    (lambda d: d["providers"]["stripe"].update(preset="strype"), "providers.stripe.preset"),
    (lambda d: d["providers"]["stripe"].update(secrets=[]), "providers.stripe.secrets"),
    (lambda d: d["providers"]["stripe"].update(path="webhooks"), "providers.stripe.path"),
    (lambda d: d["providers"]["stripe"].update(colour="red"), "providers.stripe.colour"),
    (lambda d: d["providers"]["stripe"].update(final_statuses=[200]),
     "providers.stripe.final_statuses"),
    (lambda d: d["providers"]["stripe"].update(final_statuses=["9xx"]),
     "providers.stripe.final_statuses[0]"),
    (lambda d: d["providers"]["stripe"].update(retryable_statuses=["5xx"]),
     "providers.stripe.retryable_statuses"),
    (lambda d: d["providers"]["stripe"].update(on_payload_mismatch="ignore"),
     "providers.stripe.on_payload_mismatch"),
    (lambda d: d["providers"].update(Bad={"path": "/x"}), "providers.Bad"),
    (lambda d: d["providers"].update(other={**d["providers"]["stripe"]}),
     "providers.other.path"),
])
def test_invalid_values_name_their_key_path(mutate: Any, path: str) -> None:
    data = minimal()
    mutate(data)
    assert error_path(data) == path


def test_lease_must_exceed_upstream_timeout() -> None:
    data = minimal(lease="10s")
    with pytest.raises(ConfigError, match=r"must exceed upstream\.timeout"):
        parse_config(data, env={})


def test_interpolation_with_defaults_and_missing_variables() -> None:
    env = {"SECRET": "whsec_from_env"}
    assert interpolate({"a": ["${SECRET}", "${NOPE:-fallback}", "$${SECRET}"]}, env) == {
        "a": ["whsec_from_env", "fallback", "${SECRET}"]}
    data = minimal(secrets=["${STRIPE_SECRET}"])
    assert error_path(data) == "providers.stripe.secrets[0]"
    config = parse_config(data, env={"STRIPE_SECRET": "whsec_x"})
    assert config.providers[0].key_bytes == (b"whsec_x",)


def test_secrets_from_env_and_files_several_at_once(tmp_path: Path) -> None:
    (tmp_path / "old").write_text("whsec_old\n")  # as a Kubernetes Secret file, with newline
    data = minimal(secrets=[{"env": "NEW"}, {"file": "old"}])
    config = parse_config(data, env={"NEW": "whsec_new"}, base_dir=tmp_path)
    provider = config.providers[0]
    assert provider.key_bytes == (b"whsec_new", b"whsec_old")
    assert [s.source for s in provider.secrets] == ["env:NEW", f"file:{tmp_path / 'old'}"]
    assert "whsec" not in repr(config)  # secrets are redacted in every repr
    assert error_path(minimal(secrets=[{"file": "missing"}])) == "providers.stripe.secrets[0].file"
    assert error_path(minimal(secrets=[{"env": "UNSET"}])) == "providers.stripe.secrets[0].env"


def test_a_load_without_secrets_neither_reads_nor_checks_them() -> None:
    data = minimal(secrets=["${STRIPE_SECRET}", {"env": "UNSET"}, {"file": "missing"}, ""])
    data.update(admin_token="${ADMIN_TOKEN}", admin_listen="0.0.0.0:9090")
    data["upstream"]["signing_secrets"] = ["${SIGNING_SECRET}", "not-a-whsec"]
    config = parse_config(data, env={}, secrets=Secrets.NONE)
    assert config.providers[0].secrets == () and config.upstream.signing_secrets == ()
    assert config.admin_token is None
    assert not [w for w in config.warnings if "admin_token" in w]  # unread, not unset
    assert config.providers[0].lease == 60  # everything else is read as usual …
    with pytest.raises(ConfigError) as info:  # … and checked
        parse_config({**data, "listen": "nowhere"}, env={}, secrets=Secrets.NONE)
    assert info.value.path == "listen"


def test_a_load_of_the_signing_secrets_reads_only_them() -> None:
    data = minimal(secrets=["${STRIPE_SECRET}"])
    data.update(admin_token="${ADMIN_TOKEN}")
    data["upstream"]["signing_secrets"] = ["${SIGNING_SECRET}"]
    with pytest.raises(ConfigProblems) as info:
        parse_config(data, env={}, secrets=Secrets.SIGNING)
    assert [p.path for p in info.value.problems] == ["upstream.signing_secrets[0]"]
    signing = "whsec_" + "A" * 32
    config = parse_config(data, env={"SIGNING_SECRET": signing}, secrets=Secrets.SIGNING)
    assert len(config.upstream.signing_secrets) == 1 and config.providers[0].secrets == ()


def test_standard_webhooks_secret_is_base64_decoded() -> None:
    data = minimal()
    data["providers"]["stripe"].update(preset="standard-webhooks",
                                       secrets=["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"])
    key = parse_config(data, env={}).providers[0].key_bytes[0]
    assert len(key) == 24


def test_user_keys_override_the_preset_deeply() -> None:
    data = minimal(signature={"timestamp": {"tolerance": "10m"}}, retention="90d")
    provider = parse_config(data, env={}).providers[0]
    assert provider.retention == 90 * 86400
    assert provider.signature.timestamp is not None
    assert provider.signature.timestamp.tolerance == 600


def test_password_is_redacted_from_store_repr() -> None:
    data = minimal()
    data["store"] = {"url": "postgresql://app:hunter2@db:5432/hooks"}
    config = parse_config(data, env={})
    assert "hunter2" not in repr(config)
    assert config.store.redacted_url == "postgresql://app:***@db:5432/hooks"


def test_example_config_validates(tmp_path: Path) -> None:
    shutil.copy(REPO / "config.example.yaml", tmp_path / "config.yaml")
    env = {"STRIPE_WEBHOOK_SECRET": "whsec_x", "GITHUB_WEBHOOK_SECRET": "gh",
           "ACME_WEBHOOK_SECRET": "acme"}
    config = load_config_file(tmp_path / "config.yaml", env=env)
    assert [p.key for p in config.providers] == ["stripe", "github", "acme"]
    assert config.store.sqlite_path == str(tmp_path / "webhook-sidecar.db")


def test_yaml_syntax_errors_are_config_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("providers: [unclosed")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config_file(bad)


def test_a_block_that_makes_another_choice_replaces_the_presets() -> None:
    provider = parse_config(minimal(event_id={"header": "X-Event"}), env={}).providers[0]
    assert provider.event_id.header == "X-Event" and provider.event_id.json_path is None
    # a tweak inside the preset's own choice still merges
    provider = parse_config(minimal(event_id={"max_length": 64}), env={}).providers[0]
    assert provider.event_id.json_path is not None and provider.event_id.max_length == 64


def test_non_ascii_digits_and_hostless_urls_are_rejected() -> None:
    assert error_path({**minimal(), "listen": "0.0.0.0:\u00b2"}) == "listen"
    assert error_path({**minimal(), "listen": "0.0.0.0:\u0668\u0660"}) == "listen"
    assert error_path({**minimal(), "max_body_bytes": "\u0665MiB"}) == "max_body_bytes"
    assert error_path({**minimal(), "upstream": {"url": "http://"}}) == "upstream.url"


def test_batch_providers_need_a_lease_covering_the_wait_and_the_forward() -> None:
    public_key = ("MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE83T4O/n84iotIvIW4mdBgQ/7dAfSmpqIM8kF9mN1"
                  "flpVKS3GRqe62gw+2fNNRaINXvVpiglSI8eNEc6wEA3F+g==")  # SendGrid's test key
    data = minimal(preset="sendgrid", secrets=[public_key], lease="12s",
                   inflight_wait="5s")  # upstream.timeout is 10s
    assert error_path(data) == "providers.stripe.lease"
    data["providers"]["stripe"]["lease"] = "16s"
    assert parse_config(data, env={}).providers[0].lease == 16


def test_store_session_settings_and_body_read_timeout() -> None:
    data = minimal()
    data["store"] = {"url": "postgresql://db/x", "session_settings": False,
                     "statement_cache_size": 0}
    data["body_read_timeout"] = "3s"
    config = parse_config(data, env={})
    assert config.store.session_settings is False and config.body_read_timeout == 3
    data["store"]["session_settings"] = "no"
    assert error_path(data) == "store.session_settings"


def test_store_result_commit_no_wait_is_postgresql_with_session_settings_only() -> None:
    data = minimal()
    assert parse_config(data, env={}).store.result_commit == "wait"  # the default
    data["store"] = {"url": "postgresql://db/x", "result_commit": "no_wait"}
    assert parse_config(data, env={}).store.result_commit == "no_wait"
    data["store"]["result_commit"] = "off"
    assert error_path(data) == "store.result_commit"
    # A startup parameter of the result writes' connections: pgbouncer refuses it.
    data["store"] = {"url": "postgresql://db/x", "result_commit": "no_wait",
                     "session_settings": False}
    assert error_path(data) == "store.result_commit"
    data["store"] = {"url": "sqlite:///./x.db", "result_commit": "no_wait"}
    assert error_path(data) == "store.result_commit"
    data["store"]["result_commit"] = "wait"
    assert parse_config(data, env={}).store.result_commit == "wait"


@pytest.mark.parametrize(("seconds", "text"), [
    (30 * 86400, "30d"), (7200, "2h"), (90 * 60, "90m"), (45, "45s"), (2.5, "2.5s"),
    (0.5, "500ms"), (0, "0s"), (86400 + 1, "86401s")])
def test_durations_print_in_the_syntax_they_are_read_in(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
    assert parse_duration(text, "x") == seconds


def test_a_default_applies_to_an_empty_variable_as_in_the_shell() -> None:
    assert interpolate("${APP_URL:-http://app}", {"APP_URL": ""}) == "http://app"
    assert interpolate("${APP_URL:-http://app}", {"APP_URL": "http://set"}) == "http://set"
    assert interpolate("${APP_URL}", {"APP_URL": ""}) == ""  # no default: the empty value


@block("A block.")
class _Inner:
    size: int = setting(Integer(1), "A size.", yaml_default=3)


@block("A model.", nullable=True)
class _Example:
    name: str  # not a key: filled by the loader
    timeout: float = setting(Duration(), "A timeout.", yaml_default="10s")
    _note = fieldless(Integer(0), "Read and checked, kept nowhere.")
    inner: _Inner = nested(_Inner, required=True)
    _tuning = group("Tuning.", nullable=True)
    tuning_level: int = setting(Integer(0), "A level.", yaml_default=1, key="tuning.level")
    limit: int | None = setting(Integer(0), "A limit.", nullable=True, key="max")


def test_a_key_is_declared_on_the_field_it_fills() -> None:
    """One declaration per key, on its field: the block the loader reads, and the schema and
    the docs describe, is derived from the class in the order written."""
    declared = block_of(_Example)
    assert list(declared.keys) == ["timeout", "note", "inner", "tuning", "max"]
    assert declared.doc == "A model." and declared.nullable and declared.model is _Example
    timeout = declared.keys["timeout"]
    assert (timeout.fills, timeout.default, timeout.doc) == ("timeout", "10s", "A timeout.")
    assert declared.keys["note"].fills is None and declared.keys["note"].default is NO_DEFAULT
    assert declared.keys["max"].fills == "limit" and declared.keys["max"].nullable
    inner = declared.keys["inner"]
    assert isinstance(inner.kind, Nested) and inner.kind.block is block_of(_Inner)
    assert inner.required and inner.doc == "A block."
    tuning = declared.keys["tuning"].inline_block
    assert tuning is not None and tuning.nullable and tuning.model is None
    assert tuning.keys["level"].fills == "tuning_level"
    values = {"timeout": 1.0, "note": 0, "inner": "i", "tuning": {"tuning_level": 2},
              "max": None}
    assert declared.fill(values) == {"timeout": 1.0, "inner": "i", "tuning_level": 2,
                                     "limit": None}
    example = _Example(name="n", timeout=1.0, inner=_Inner(size=3), tuning_level=2, limit=None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        example.timeout = 2.0  # type: ignore[misc]


def test_a_key_in_an_undeclared_group_is_an_error_at_import() -> None:
    with pytest.raises(TypeError, match=r"no group 'tuning'"):
        @block("A model.")
        class _Broken:
            level: int = setting(Integer(0), "A level.", key="tuning.level")


def _filled(declared: Block) -> set[str]:
    fields = set()
    for key in declared.keys.values():
        if (inline := key.inline_block) is not None:
            fields |= _filled(inline)
        elif key.fills is not None:
            fields.add(key.fills)
    return fields


@pytest.mark.parametrize("prefix", [p for p, b in BLOCKS.items() if b.model is not None])
def test_every_model_field_is_a_key_but_those_the_loader_fills(prefix: str) -> None:
    """A field declared without ``setting`` is not read from the file: only these are."""
    declared = BLOCKS[prefix]
    assert declared.model is not None
    fields = {field.name for field in dataclasses.fields(declared.model)}
    loader_fills = {"": {"warnings", "unread_secrets"},
                    "providers.<key>": {"key", "routes", "destination"}}.get(prefix, set())
    assert fields - _filled(declared) == loader_fills


def test_choices_are_enums_equal_to_their_yaml_text() -> None:
    data = minimal(on_payload_mismatch="reject")
    data["log"] = {"level": "debug", "format": "json"}
    config = parse_config(data, env={})
    mismatch = config.providers[0].on_payload_mismatch
    assert mismatch is PayloadMismatch.REJECT and mismatch == "reject"
    assert config.log_level is LogLevel.DEBUG and config.log_format is LogFormat.JSON
    assert config.store.kind is StoreKind.SQLITE and f"{config.store.kind}" == "sqlite"
    with pytest.raises(ConfigError, match=r"must be one of duplicate, reject$"):
        parse_config(minimal(on_payload_mismatch="ignore"), env={})


def test_with_several_mistakes_each_is_reported_in_the_order_written() -> None:
    """``path`` is the first mistake in the file; the error lists every one (a lease compared
    with an upstream.timeout that is itself wrong is not: that check is skipped)."""
    data = minimal(lease="5s")
    data.update(admin_token="short", upstream={"url": "http://a", "timeout": "soon"})
    with pytest.raises(ConfigProblems) as info:
        parse_config(data, env={})
    assert info.value.path == "upstream.timeout"
    assert [p.path for p in info.value.problems] == ["upstream.timeout", "admin_token"]
    del data["upstream"]["timeout"]
    with pytest.raises(ConfigProblems) as info:
        parse_config(data, env={})
    assert [p.path for p in info.value.problems] == ["providers.stripe.lease", "admin_token"]


def test_queue_mode_keys_and_their_defaults() -> None:
    provider = parse_config(minimal(mode="queue", queue={"order_key": "$.data.object.id"}),
                            env={}).providers[0]
    assert provider.mode == "queue"
    queue = provider.queue
    assert (queue.max_attempts, queue.max_age, queue.first_retry, queue.max_retry_delay,
            queue.concurrency, queue.max_queue_depth, queue.poll_interval) == (
        20, 3 * 86400, 1.0, 3600.0, 10, None, 1.0)
    assert queue.order_key is not None and queue.order_key.steps == ("data", "object", "id")
    assert parse_config(minimal(), env={}).providers[0].mode == "forward"


@pytest.mark.parametrize(("provider", "path", "message"), [
    ({"mode": "queued"}, "providers.stripe.mode", "did you mean queue"),
    ({"mode": "queue", "queue": {"max_retry_delay": "500ms"}},
     "providers.stripe.queue.max_retry_delay", "must not be shorter than first_retry"),
    ({"mode": "queue", "queue": {"order_key": "data..id"}},
     "providers.stripe.queue.order_key", ""),
    ({"mode": "queue", "queue": {"max_queue_depth": 0}},
     "providers.stripe.queue.max_queue_depth", "integer ≥ 1"),
    ({"mode": "queue", "queue": {"concurency": 3}}, "providers.stripe.queue.concurency",
     "did you mean concurrency"),
])
def test_queue_mode_mistakes_name_their_key(provider: dict[str, Any], path: str,
                                            message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(minimal(**provider), env={})
    assert info.value.path == path
    assert message in str(info.value)


def test_a_batch_provider_cannot_queue() -> None:
    public_key = ("MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE83T4O/n84iotIvIW4mdBgQ/7dAfSmpqIM8kF9mN1"
                  "flpVKS3GRqe62gw+2fNNRaINXvVpiglSI8eNEc6wEA3F+g==")  # SendGrid's test key
    data = minimal(preset="sendgrid", secrets=[public_key], mode="queue")
    with pytest.raises(ConfigError, match="not available for a batch provider") as info:
        parse_config(data, env={})
    assert info.value.path == "providers.stripe.mode"


def test_a_retention_shorter_than_max_age_is_warned_about() -> None:
    config = parse_config(minimal(mode="queue", retention="2d"), env={})
    assert any("shorter than queue.max_age" in w for w in config.warnings)


def test_a_queue_lease_without_room_for_a_slow_take_is_warned_about() -> None:
    tight = parse_config(minimal(mode="queue", lease="12s"), env={})  # 10s + 5s by default
    assert any("shorter than upstream.timeout + store.statement_timeout" in w
               for w in tight.warnings)
    assert not any("statement_timeout" in w for w in parse_config(
        minimal(mode="queue"), env={}).warnings)
    assert not any("statement_timeout" in w for w in parse_config(
        minimal(lease="12s"), env={}).warnings)  # forward mode: the claim is the lease's start
