"""Config errors an operator can act on: every mistake at once, in the order written, with its
line; "did you mean …?"; which keys to change when two disagree, and their defaults; and never
a secret's value in a message."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from sidecar.config.blocks import BLOCKS, PROVIDER
from sidecar.config.loader import load_config_file, parse_config
from sidecar.config.presets import load_preset
from sidecar.config.problems import ConfigProblems, Problem
from sidecar.core.errors import ConfigError

SENDGRID_KEY = ("MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE83T4O/n84iotIvIW4mdBgQ/7dAfSmpqIM8kF9mN1"
                "flpVKS3GRqe62gw+2fNNRaINXvVpiglSI8eNEc6wEA3F+g==")  # SendGrid's test key


def minimal(**provider: Any) -> dict[str, Any]:
    return {
        "upstream": {"url": "http://127.0.0.1:3000"},
        "providers": {"stripe": {"path": "/webhooks/stripe", "preset": "stripe",
                                 "secrets": ["whsec_abc"], **provider}},
    }


def problems(data: object, env: dict[str, str] | None = None,
             base_dir: Path | None = None) -> ConfigProblems:
    with pytest.raises(ConfigProblems) as info:
        parse_config(data, env=env or {}, base_dir=base_dir)
    return info.value


def only(data: object, env: dict[str, str] | None = None) -> Problem:
    [problem] = problems(data, env).problems
    return problem


def default(block: str, key: str) -> object:
    value = BLOCKS[block].keys[key].default
    assert isinstance(value, str | int)
    return value


# --- every mistake, in the order written ----------------------------------------------------

def test_independent_mistakes_are_all_reported_in_file_order() -> None:
    data = {
        "lsten": "0.0.0.0:8080",
        "upstream": {"url": "http://127.0.0.1:3000", "timeout": "ten seconds"},
        "providers": {
            "stripe": {"path": "/webhooks/stripe", "preset": "strype", "secrets": ["whsec_a"]},
            "github": {"preset": "github", "secrets": ["gh"]},
        },
    }
    error = problems(data)
    assert [p.path for p in error.problems] == [
        "lsten", "upstream.timeout", "providers.stripe.preset", "providers.github.path"]
    assert (error.path, error.message) == (error.problems[0].path, error.problems[0].message)
    assert isinstance(error, ConfigError)  # one exception type for every caller
    text = str(error)
    assert text.splitlines()[0] == "4 problems:"
    assert all(p.render() in text for p in error.problems)


def test_the_order_is_the_files_not_the_declarations() -> None:
    data = minimal(on_payload_mismatch="ignore")
    data = {"providers": data["providers"], "admin_token": "short", "listen": "8080",
            "upstream": data["upstream"]}
    assert [p.path for p in problems(data).problems] == [
        "providers.stripe.on_payload_mismatch", "admin_token", "listen"]


def test_one_problem_reads_as_before() -> None:
    error = problems(minimal(lease="5s"))
    assert len(error.problems) == 1 and error.path == "providers.stripe.lease"
    assert str(error) == f"providers.stripe.lease: {error.message}"
    assert error.summary == "1 problem"


@pytest.mark.parametrize("block", [None, "not a mapping", ["a", "list"]])
def test_a_provider_block_that_is_not_a_mapping_is_one_problem(block: object) -> None:
    data = minimal()
    data["providers"]["broken"] = block
    if block is None:  # an empty block: each required key is missing
        assert [p.path for p in problems(data).problems] == [
            "providers.broken.path", "providers.broken.signature", "providers.broken.event_id",
            "providers.broken.secrets"]
    else:
        assert only(data) == Problem("providers.broken", "must be a mapping")


def test_checks_that_need_a_wrong_value_are_skipped() -> None:
    # the secrets cannot be decoded without a signature scheme: only the signature is named
    data = minimal(signature={"algorithm": "hmac-sha256", "encoding": "base64"},
                   secrets=["not base64!"])
    data["providers"]["stripe"].pop("preset")
    data["providers"]["stripe"]["event_id"] = {"json": "$.id"}
    [problem] = problems(data).problems
    assert problem.path.startswith("providers.stripe.signature.")
    # the lease cannot be compared with a timeout that is wrong; the retention still can be
    # compared with the lease
    data = minimal(lease="5s", retention="4s")
    data["upstream"]["timeout"] = "soon"
    assert [p.path for p in problems(data).problems] == [
        "upstream.timeout", "providers.stripe.retention"]
    # a lease that is itself wrong is not compared again
    assert [p.path for p in problems(minimal(lease="5s", retention="4s")).problems] == [
        "providers.stripe.lease"]


def test_an_unknown_preset_skips_the_rest_of_its_block_only() -> None:
    data = minimal(preset="strype", lease="1s", colour="red")
    data["providers"]["other"] = {"preset": "github", "path": "/gh", "secrets": ["s"],
                                  "retention": "1s"}
    assert [p.path for p in problems(data).problems] == [
        "providers.stripe.preset", "providers.stripe.colour", "providers.other.retention"]


def test_unset_variables_are_reported_key_by_key_and_never_for_unknown_keys() -> None:
    data = minimal(secrets=["${STRIPE_SECRET}"])
    data["upstream"]["url"] = "${APP_URL}"
    data["nonsense"] = "${ALSO_UNSET}"
    error = problems(data)
    assert [(p.path, p.message.split(" (")[0]) for p in error.problems] == [
        ("upstream.url", "environment variable APP_URL is not set"),
        ("providers.stripe.secrets[0]", "environment variable STRIPE_SECRET is not set"),
        ("nonsense", "unknown key"),
    ]


def test_an_empty_secret_from_a_variable_names_the_variable() -> None:
    data = minimal(secrets=["${STRIPE_SECRET}", "${SPARE_SECRET:-}", {"env": "OTHER"}])
    data["upstream"]["signing_secrets"] = ["${SIGNING_SECRET}"]
    env = {"STRIPE_SECRET": "", "SIGNING_SECRET": "", "OTHER": ""}
    assert [(p.path, p.message) for p in problems(data, env).problems] == [
        ("upstream.signing_secrets[0]",
         "secret from ${SIGNING_SECRET} is empty: SIGNING_SECRET is set but empty"),
        ("providers.stripe.secrets[0]",
         "secret from ${STRIPE_SECRET} is empty: STRIPE_SECRET is set but empty"),
        ("providers.stripe.secrets[1]",
         "secret from ${SPARE_SECRET:-} is empty: SPARE_SECRET is not set, and its default "
         "is empty"),
        ("providers.stripe.secrets[2]", "secret from env:OTHER is empty"),
    ]


def test_a_path_used_twice_is_named_with_the_other_mistakes() -> None:
    data = minimal()
    data["providers"]["copy"] = {**data["providers"]["stripe"], "lease": "1s"}
    assert [p.path for p in problems(data).problems] == [
        "providers.copy.path", "providers.copy.lease"]


# --- did you mean … -------------------------------------------------------------------------

@pytest.mark.parametrize(("mutate", "path", "suggestion"), [
    (lambda d: d.update(lsten="0.0.0.0:8080"), "lsten", "listen"),
    (lambda d: d["upstream"].update(timout="1s"), "upstream.timout", "timeout"),
    (lambda d: d.update(store={"pool_max": 3}), "store.pool_max", "pool_max_size"),
    (lambda d: d.update(log={"levl": "info"}), "log.levl", "level"),
    (lambda d: d.update(maintenance={"intervall": "1m"}), "maintenance.intervall", "interval"),
    (lambda d: d["providers"]["stripe"].update(leese="90s"), "providers.stripe.leese", "lease"),
    (lambda d: d["providers"]["stripe"].update(signature={"headr": "X"}),
     "providers.stripe.signature.headr", "header"),
    (lambda d: d["providers"]["stripe"].update(signature={"timestamp": {"tolerence": "1m"}}),
     "providers.stripe.signature.timestamp.tolerence", "tolerance"),
    (lambda d: d["providers"]["stripe"].update(event_id={"max_lenght": 9}),
     "providers.stripe.event_id.max_lenght", "max_length"),
    (lambda d: d["providers"]["stripe"].update(preset="strype"), "providers.stripe.preset",
     "stripe"),
    (lambda d: d["providers"]["stripe"].update(preset="Stripe"), "providers.stripe.preset",
     "stripe"),
    (lambda d: d.update(log={"level": "warn"}), "log.level", "warning"),
    (lambda d: d["providers"].update(Stripe=d["providers"].pop("stripe")), "providers.Stripe",
     "stripe"),
])
def test_a_misspelt_name_gets_a_suggestion(mutate: Any, path: str, suggestion: str) -> None:
    data = minimal()
    mutate(data)
    problem = only(data)
    assert problem.path == path
    assert f"did you mean {suggestion}?" in problem.message


def test_no_suggestion_when_nothing_is_close() -> None:
    problem = only({**minimal(), "zzzzzz": 1})
    assert problem.message.startswith("unknown key (allowed: admin_listen, admin_max_connections, "
                                      "admin_token")
    assert "did you mean" not in problem.message


def test_a_removed_key_says_what_replaced_it() -> None:
    problem = only(minimal(retryable_statuses=["5xx"]))
    assert problem.message.startswith("replaced by final_statuses")


# --- lines and columns ----------------------------------------------------------------------

CONFIG = """\
upstream:
  url: http://127.0.0.1:3000
  timeout: soon
providers:
  stripe:
    path: /webhooks/stripe
    preset: stripe
    secrets: [whsec_abc]
    leese: 90s
  github:
    preset: github
    secrets: [{env: GH_SECRET}]
"""


def test_each_problem_names_the_file_line_and_column_of_its_key(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG)
    with pytest.raises(ConfigProblems) as info:
        load_config_file(path, env={})
    assert info.value.lines == (
        f"{path}:3:3: upstream.timeout: must be a duration such as 500ms, 10s, 5m, 2h, 3d or a "
        "number of seconds, got 'soon'",
        f"{path}:9:5: providers.stripe.leese: unknown key; did you mean lease? (allowed: "
        f"{', '.join(sorted(PROVIDER.names))})",
        f"{path}:10:3: providers.github.path: is required",  # missing: its block's line
        f"{path}:12:16: providers.github.secrets[0].env: environment variable GH_SECRET is "
        "not set",
    )
    assert info.value.summary == f"4 problems in {path}"
    assert info.value.problems[0].mark == (3, 3)


@pytest.mark.parametrize(("text", "line"), [
    ("upstream:\n  url: http://a\n   timeout: 5s\n",
     ":3:11: invalid YAML: mapping values are not allowed here"),
    ("providers: [unclosed\n",
     ":2:1: invalid YAML: expected ',' or ']', but got '<stream end>' (while parsing a flow "
     "sequence at line 1, column 12)"),
    ("upstream:\n\t url: http://a\n",
     ":2:1: invalid YAML: found character '\\t' that cannot start any token (while scanning "
     "for the next token)"),
    ("a: 1\nb: \"x\x01\"\n",
     ":2:6: invalid YAML: unacceptable character #x0001: special characters are not allowed"),
])
def test_yaml_syntax_errors_name_the_file_line_and_column(tmp_path: Path, text: str,
                                                          line: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config_file(path, env={})
    assert str(info.value) == f"{path}{line}"
    assert info.value.path == "" and info.value.message.startswith("invalid YAML: ")


def test_a_syntax_error_never_quotes_the_line(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("providers:\n  s:\n    secrets: [whsec_very_secret\n  x: 1\n")
    with pytest.raises(ConfigError) as info:
        load_config_file(path, env={})
    assert "whsec_very_secret" not in str(info.value)
    assert str(info.value).startswith(f"{path}:4:4: invalid YAML: ")


def test_a_file_that_is_not_text_or_not_there(tmp_path: Path) -> None:
    (tmp_path / "binary.yaml").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match="is not UTF-8 text"):
        load_config_file(tmp_path / "binary.yaml", env={})
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config_file(tmp_path / "absent.yaml", env={})


@pytest.mark.parametrize("command", ["run", "migrate"])
def test_the_commands_say_why_a_config_file_cannot_be_read_as_the_loader_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    command: str,
) -> None:
    """``run`` reads the file itself (its workers start from the text it read): its reasons
    are the loader's, word for word, as are those of the commands that load the file."""
    from sidecar.cli import CONFIG_ENV, EXIT_CONFIG, main

    (tmp_path / "binary.yaml").write_bytes(b"\xff\xfe\x00")
    for path in (tmp_path / "binary.yaml", tmp_path / "absent.yaml"):
        with pytest.raises(ConfigError) as info:
            load_config_file(path, env={})
        assert main([command, "--config", str(path)]) == EXIT_CONFIG
        assert capsys.readouterr().err == f"webhook-sidecar: config error: {info.value}\n"
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    assert main([command]) == EXIT_CONFIG
    assert capsys.readouterr().err == ("webhook-sidecar: config error: no config file: pass "
                                       f"--config PATH or set ${CONFIG_ENV}\n")


# --- two keys that disagree: which to change, and their defaults ----------------------------

def test_a_lease_within_the_upstream_timeout_names_both_keys_and_their_defaults() -> None:
    data = minimal(lease="30s")
    data["upstream"]["timeout"] = "40s"
    problem = only(data)
    assert problem.path == "providers.stripe.lease"
    assert problem.message == (
        "must exceed upstream.timeout (40s; the lease is 30s), or a slow but live first "
        "attempt would be taken over; to fix, raise providers.stripe.lease (default "
        f"{default('providers.<key>', 'lease')}) or lower upstream.timeout (default "
        f"{default('upstream', 'timeout')})")


def test_a_presets_value_is_named_as_the_default_it_replaces() -> None:
    problem = only(minimal(lease="31d"))  # Stripe's preset sets a 30d retention
    assert problem.path == "providers.stripe.retention"
    assert problem.message == (
        "must exceed the lease (30d ≤ 31d); to fix, raise providers.stripe.retention (stripe "
        f"preset: {load_preset('stripe')['retention']}) or lower providers.stripe.lease "
        f"(default {default('providers.<key>', 'lease')})")


def test_an_inflight_wait_over_the_lease_names_both_keys() -> None:
    problem = only(minimal(inflight_wait="2m"))
    assert problem.path == "providers.stripe.inflight_wait"
    assert problem.message == (
        "must not exceed the lease (2m > 1m); to fix, lower providers.stripe.inflight_wait "
        f"(stripe preset: {load_preset('stripe')['inflight_wait']}) or raise "
        f"providers.stripe.lease (default {default('providers.<key>', 'lease')})")


def test_a_batch_lease_names_the_three_keys_it_depends_on() -> None:
    problem = only(minimal(preset="sendgrid", secrets=[SENDGRID_KEY], lease="12s"))
    assert problem.path == "providers.stripe.lease"
    assert problem.message == (
        "must exceed upstream.timeout + inflight_wait (10s + 5s = 15s; the lease is 12s) for a "
        "batch provider: an item's lease runs while the delivery waits for its other items; "
        f"to fix, raise providers.stripe.lease (default {default('providers.<key>', 'lease')}) "
        "or lower providers.stripe.inflight_wait (sendgrid preset: "
        f"{load_preset('sendgrid')['inflight_wait']}) or lower upstream.timeout (default "
        f"{default('upstream', 'timeout')})")


def test_pool_sizes_and_listeners_name_both_keys() -> None:
    data = minimal()
    data["store"] = {"url": "postgresql://db/x", "pool_min_size": 12}
    problem = only(data)
    assert problem == Problem("store.pool_min_size", (
        "must not exceed pool_max_size (12 > 10); to fix, lower store.pool_min_size (default "
        f"{default('store', 'pool_min_size')}) or raise store.pool_max_size (default "
        f"{default('store', 'pool_max_size')})"))
    problem = only({**minimal(), "listen": "0.0.0.0:7000", "admin_listen": "0.0.0.0:7000"})
    assert problem.path == "admin_listen"
    assert problem.message.endswith(
        f"; to fix, change admin_listen (default {default('', 'admin_listen')}) or change "
        f"listen (default {default('', 'listen')})")


def test_no_default_is_given_for_a_key_holding_a_secret() -> None:
    from sidecar.config.hints import default_of

    assert default_of("upstream.timeout") == f" (default {default('upstream', 'timeout')})"
    assert PROVIDER.keys["lease"].default is not None
    for secret_like in ("admin_token", "store.url", "upstream.signing_secrets",
                        "providers.<key>.secrets"):
        assert default_of(secret_like, preset="stripe") == "", secret_like


# --- secrets never appear in a message ------------------------------------------------------

SECRETS = ("whsec_inline_0123456789", "env-secret-value-987", "file-secret-value-654",
           "admin-token-abc", "hunter2-password", "whsec_signing_not_base64!")


def test_no_message_quotes_a_secret(tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("file-secret-value-654\n")
    env = {"SW_SECRET": "env-secret-value-987", "TOKEN": "admin-token-abc"}
    data: dict[str, Any] = {
        "admin_token": "${TOKEN}",  # too short
        "upstream": {"url": "http://a", "timeout": "soon",
                     "signing_secrets": ["whsec_signing_not_base64!"]},
        "store": {"url": "mysql://app:hunter2-password@db/x?sslmode=require"},  # no such option
        "providers": {
            "sw": {"path": "/sw", "preset": "standard-webhooks",
                   "secrets": ["whsec_inline_0123456789", {"env": "SW_SECRET"},
                               {"file": "secret.txt"}]},
            "keyed": {"path": "/k", "preset": "github",
                      "secrets": [{"whsec_inline_0123456789": None}]},
            "mapped": {"path": "/m", "preset": "github",
                       "secrets": {"env-secret-value-987": "x", "file": "secret.txt"}},
            "typo": {"path": "/t", "preset": "github", "secrets": [{"evn": "SW_SECRET"}]},
        },
    }
    error = problems(copy.deepcopy(data), env=env, base_dir=tmp_path)
    text = "\n".join([str(error), *error.lines, *(p.message for p in error.problems)])
    for secret in SECRETS:
        assert secret not in text
        assert secret[:10] not in text
    paths = [p.path for p in error.problems]
    assert paths == [
        "admin_token", "upstream.timeout", "upstream.signing_secrets[0]", "store.url",
        "providers.sw.secrets[0]", "providers.sw.secrets[1]", "providers.sw.secrets[2]",
        "providers.keyed.secrets[0]", "providers.mapped.secrets[0]", "providers.typo.secrets[0]"]
    assert "did you mean env?" in error.problems[-1].message


def test_partitioning_is_for_postgresql_and_minutes_at_least() -> None:
    data = minimal()
    data["store"] = {"url": "postgresql://db/x", "partitioning": {"interval": "1d"}}
    assert parse_config(data, env={}).store.partitioning.interval == 86400
    data["store"]["partitioning"] = {"interval": "30s"}
    assert only(data) == Problem("store.partitioning.interval",
                                 "must be whole seconds, 1m at least (not 30s)")
    data["store"] = {"url": "sqlite:///x.db", "partitioning": {"interval": "1d"}}
    problem = only(data)
    assert problem.path == "store.partitioning.interval"
    assert problem.message.startswith("partitioning is for PostgreSQL")
    unset = parse_config(minimal(), env={}).store.partitioning
    assert unset.interval is None and unset.ahead == 3
