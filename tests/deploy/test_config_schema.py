"""The config JSON Schema: generated from the key declarations on the model's fields
(sidecar/config/model/) the loader reads, committed, and in agreement with the loader — every
config the schema rejects, the loader rejects too; the loader's extra rules (what JSON Schema
cannot express) are listed and each is shown by a case."""

from __future__ import annotations

import base64
import copy
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sidecar.config.blocks import BLOCKS, PROVIDER, TOP
from sidecar.config.declarations import NO_DEFAULT, Block, Nested
from sidecar.config.loader import LOADER_ONLY_RULES, parse_config
from sidecar.config.presets import load_preset, preset_names
from sidecar.config.schema.document import SCHEMA_FILE, build_schema, schema_text
from sidecar.config.schema.nested import nested_defs
from sidecar.config.schema.reference import REFERENCE_DOC, current_reference, reference_markdown
from sidecar.config.schema.signature import FORMAT_KEYS, PLUGIN_KEYS, SIGNATURE_KEYS
from sidecar.config.schema.values import VALUE_DEFS
from sidecar.core.errors import ConfigError
from sidecar.core.signing import ALGORITHMS, ENCODINGS, FORMATS, PLUGINS, SECRET_DECODERS
from sidecar.core.signing import spec as signing_spec
from tests.deploy.cases import ENV, FILES, INVALID, LOADER_ONLY, VALID, Case

REPO = Path(__file__).resolve().parents[2]
REGENERATE = "python -m sidecar.config.schema --write"


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads((REPO / SCHEMA_FILE).read_text(encoding="utf-8"))
    return jsonschema.Draft202012Validator(schema)


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("config")
    for name, content in FILES.items():
        (folder / name).write_text(content, encoding="utf-8")
    return folder


def schema_errors(validator: jsonschema.Draft202012Validator, config: Any) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message[:300]}"
            for e in validator.iter_errors(config)]


def loader_error(case: Case, base_dir: Path) -> ConfigError | None:
    try:
        parse_config(copy.deepcopy(case.config), env=case.env, base_dir=base_dir)
    except ConfigError as exc:
        return exc
    return None


# --- the committed artefacts are the generated ones ----------------------------------------

def test_committed_schema_is_the_generated_one() -> None:
    committed = (REPO / SCHEMA_FILE).read_text(encoding="utf-8")
    assert committed == schema_text(), (
        f"{SCHEMA_FILE} is stale: run `{REGENERATE}` and commit the result")


def test_reference_tables_in_the_docs_are_the_generated_ones() -> None:
    document = (REPO / REFERENCE_DOC).read_text(encoding="utf-8")
    assert current_reference(document) == reference_markdown(), (
        f"the key tables in {REFERENCE_DOC} are stale: run `{REGENERATE}`")


def test_schema_is_a_valid_2020_12_schema_and_deterministic() -> None:
    schema = build_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema_text() == schema_text()


def test_example_config_points_editors_at_the_schema(
        validator: jsonschema.Draft202012Validator) -> None:
    text = (REPO / "config.example.yaml").read_text(encoding="utf-8")
    assert text.splitlines()[0] == f"# yaml-language-server: $schema=./{SCHEMA_FILE}"
    assert schema_errors(validator, yaml.safe_load(text)) == []


# --- the blocks core parses: declared apart from their parsers --------------------------------
# (The keys declared on the model need no such test: the loader reads them.)

def test_signature_description_covers_every_registry_entry() -> None:
    schema = build_schema()
    defs = schema["$defs"]
    assert set(SIGNATURE_KEYS) == set(signing_spec._SPEC_KEYS)
    assert set(FORMAT_KEYS) == set(FORMATS), "a header format without a schema entry"
    assert set(PLUGIN_KEYS) == set(PLUGINS), "a signature plugin without a schema entry"
    declarative = defs["signature"]["oneOf"][0]
    assert declarative["properties"]["algorithm"]["anyOf"][0]["enum"] == sorted(ALGORITHMS)
    assert declarative["properties"]["encoding"]["anyOf"][0]["enum"] == sorted(ENCODINGS)
    secret = defs["secret_spec"]["properties"]["encoding"]["anyOf"][0]["enum"]
    assert secret == sorted(SECRET_DECODERS)
    provider = defs["provider"]["properties"]["preset"]["anyOf"][0]["enum"]
    assert provider == preset_names()


def _defaults(block: Block) -> dict[str, Any]:
    return {name: key.default for name, key in block.keys.items()
            if key.default is not NO_DEFAULT and not isinstance(key.kind, Nested)}


def test_documented_defaults_are_the_loaders(base_dir: Path) -> None:
    """Writing every documented default explicitly yields the same config as omitting it (the
    signature, timestamp, secret, format and event id defaults are declared apart from core's
    parsers; the others are the very values the loader reads)."""
    acme = {"path": "/acme", "secrets": ["s"], "event_id": {"header": "X-Id"},
            "signature": {"algorithm": "hmac-sha256", "header": "X-Sig", "encoding": "hex",
                          "message": "{timestamp}.{body}",
                          "format": {"type": "kv_list", "signature_keys": ["v1"],
                                     "timestamp_key": "t"},
                          "timestamp": {"from": "signature"}}}
    omitted = {"upstream": {"url": "http://a"}, "providers": {"acme": acme}}
    explicit = copy.deepcopy(omitted)
    explicit.update(_defaults(TOP))
    explicit["upstream"].update(_defaults(BLOCKS["upstream"]))
    for name in ("store", "log", "maintenance"):
        explicit[name] = _defaults(BLOCKS[name])
    provider = explicit["providers"]["acme"]
    provider.update(_defaults(PROVIDER))
    defs = build_schema()["$defs"]
    provider["signature"]["timestamp"].update(
        {k: v["default"] for k, v in defs["timestamp"]["properties"].items() if "default" in v})
    provider["signature"]["secret"] = {
        k: v["default"] for k, v in defs["secret_spec"]["properties"].items()}
    provider["signature"]["format"].update(
        {k: v["default"] for k, v in FORMAT_KEYS["kv_list"].items() if "default" in v})
    provider["event_id"]["max_length"] = defs["event_id"]["properties"]["max_length"]["default"]
    assert _defaults(TOP) and _defaults(PROVIDER)  # found some (their number may grow)
    assert (parse_config(explicit, env={}, base_dir=base_dir)
            == parse_config(omitted, env={}, base_dir=base_dir))


def test_every_shipped_preset_is_a_valid_provider_block(
        validator: jsonschema.Draft202012Validator) -> None:
    """Presets are data in the schema a user writes: each one, written out in full without
    ``preset:``, validates (Twilio's signs the public URL, which the user gives)."""
    for name in preset_names():
        block = load_preset(name)
        if block.get("signature", {}).get("plugin") == "twilio":
            block["signature"]["url"] = "https://example.com/twilio"
        config = {"upstream": {"url": "http://a"},
                  "providers": {"p": {"path": "/p", "secrets": ["s"], **block}}}
        assert schema_errors(validator, config) == [], name


# --- agreement --------------------------------------------------------------------------------

@pytest.mark.parametrize("case", VALID, ids=[c.id for c in VALID])
def test_valid_configs_pass_both(case: Case, validator: jsonschema.Draft202012Validator,
                                 base_dir: Path) -> None:
    assert schema_errors(validator, case.config) == []
    assert loader_error(case, base_dir) is None


@pytest.mark.parametrize("case", INVALID, ids=[c.id for c in INVALID])
def test_invalid_configs_fail_both(case: Case, validator: jsonschema.Draft202012Validator,
                                   base_dir: Path) -> None:
    assert schema_errors(validator, case.config) != [], "the schema accepts it"
    assert loader_error(case, base_dir) is not None, "the loader accepts it"


@pytest.mark.parametrize("case", LOADER_ONLY, ids=[c.id for c in LOADER_ONLY])
def test_loader_only_rules_schema_accepts_loader_rejects(
        case: Case, validator: jsonschema.Draft202012Validator, base_dir: Path) -> None:
    assert schema_errors(validator, case.config) == []
    assert loader_error(case, base_dir) is not None


def test_every_loader_only_rule_is_shown_by_a_case() -> None:
    assert {c.rule for c in LOADER_ONLY} == set(range(len(LOADER_ONLY_RULES)))


# Mappings whose keys are data, not config keys.
_FREE = ({"providers"}, {"algorithms"}, {"equals"}, {"headers"})  # free names


def _mappings(node: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    if isinstance(node, dict):
        if path[-1:] not in [(k,) for free in _FREE for k in free] and path[-2:] != (
                "respond", "json"):
            yield path
        for key, value in node.items():
            if path[-2:] == ("respond", "json") or path[-1:] == ("equals",):
                continue
            yield from _mappings(value, (*path, str(key)))
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from _mappings(item, (*path, str(index)))


def _at(config: Any, path: tuple[str, ...]) -> Any:
    for step in path:
        config = config[int(step)] if isinstance(config, list) else config[step]
    return config


@pytest.mark.parametrize("case", VALID, ids=[c.id for c in VALID])
def test_an_unknown_key_in_any_mapping_fails_both(
        case: Case, validator: jsonschema.Draft202012Validator, base_dir: Path) -> None:
    paths = list(_mappings(case.config))
    assert paths
    for path in paths:
        config = copy.deepcopy(case.config)
        _at(config, path)["zz_unknown"] = "x"
        broken = Case(case.id, config, case.env)
        assert schema_errors(validator, config) != [], path
        assert loader_error(broken, base_dir) is not None, path


def _declared_keys(node: Any) -> set[str]:
    keys: set[str] = set()
    if isinstance(node, dict):
        for name, value in node.items():
            if name == "properties" and isinstance(value, dict):
                keys.update(value)
            keys |= _declared_keys(value)
    elif isinstance(node, list):
        for item in node:
            keys |= _declared_keys(item)
    return keys


def _used_keys(node: Any) -> set[str]:
    keys: set[str] = set()
    if isinstance(node, dict):
        keys.update(str(k) for k in node)
        for value in node.values():
            keys |= _used_keys(value)
    elif isinstance(node, list):
        for item in node:
            keys |= _used_keys(item)
    return keys


def test_every_key_the_schema_declares_is_accepted_by_the_loader_somewhere() -> None:
    """For the blocks core parses (and the secret forms): the keys declared on the model are
    the loader's by construction."""
    used: set[str] = set()
    for case in VALID:
        used |= _used_keys(case.config)
    assert _declared_keys({**nested_defs(), **VALUE_DEFS}) - used == set()


# --- property test: what the schema rejects, the loader rejects -----------------------------

_VALUES: list[Any] = [
    None, True, False, 0, -1, 1, 7, 100.0, 0.5, 10**400, "", " ", "x", "1s", "0s", "-1s",
    "10 minutes", "5xx", "2xx", 200, 429, 600, "$.id", "$[*]", "$", "{body}", "{timestamp}",
    "http://a", "ftp://a", "/p", "0.0.0.0:1", ":1", "127.0.0.1:70000", "sqlite:///x.db",
    "postgresql://h/db", "${UNSET_X}", "${UNSET_X:-3s}", "1MiB", "0MiB", "utf8", "hex",
    "plain", "kv_list", "token", "X-Header", "Bad Header", [], ["x"], [200], ["5xx"], {},
    {"x": 1}, {"env": "GITHUB_SECRET"}, {"file": "acme-secret.txt"}, {"header": "X-Id"},
    {"json": "$.id"},
]


def mutate(case: Case, path_index: int, value_index: int, delete: bool) -> Case:
    """``case`` with one node replaced by a value from ``_VALUES`` (or deleted)."""
    config = copy.deepcopy(case.config)
    paths = [p for p in _leaf_paths(config) if p]
    path = paths[path_index % len(paths)]
    parent = _at(config, path[:-1])
    value = _VALUES[value_index % len(_VALUES)]
    if delete and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[int(path[-1]) if isinstance(parent, list) else path[-1]] = copy.deepcopy(value)
    return Case(f"{case.id}:{'.'.join(path)}={'<deleted>' if delete else value!r}", config,
                case.env)


def _leaf_paths(node: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaf_paths(value, (*path, str(key)))
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from _leaf_paths(item, (*path, str(index)))


@settings(max_examples=400, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case_index=st.integers(0, len(VALID) - 1), path_index=st.integers(0, 10**6),
       value_index=st.integers(0, 10**6), delete=st.booleans())
def test_mutated_configs_the_schema_rejects_the_loader_rejects(
        case_index: int, path_index: int, value_index: int, delete: bool,
        validator: jsonschema.Draft202012Validator, base_dir: Path) -> None:
    case = mutate(VALID[case_index], path_index, value_index, delete)
    errors = schema_errors(validator, case.config)
    try:
        rejected = loader_error(case, base_dir) is not None
    except ValueError:  # see cases.CRASHES
        rejected = True
    assert errors == [] or rejected, f"{case.id}: the loader accepts what the schema rejects: "\
        f"{errors}"


# --- the command line -------------------------------------------------------------------------

def test_check_config_rejects_a_config_the_schema_rejects(
        tmp_path: Path, validator: jsonschema.Draft202012Validator) -> None:
    bad = next(c for c in INVALID if c.id == "signature-algorithm-unknown").config
    assert schema_errors(validator, bad) != []
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad), encoding="utf-8")
    for name, content in FILES.items():
        (tmp_path / name).write_text(content, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "sidecar", "check-config", "--config", str(path)],
        capture_output=True, text=True, timeout=60, env={**ENV, "PATH": "/usr/bin:/bin"},
        cwd=REPO, check=False)
    assert result.returncode == 2, result.stderr
    assert "providers.acme.signature.algorithm" in result.stderr


def _doc_configs() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        for index, block in enumerate(re.findall(r"```yaml\n(.*?)```", text, re.S)):
            if "{{" in block:  # a Helm template, not a config
                continue
            data = yaml.safe_load(block)
            if isinstance(data, dict) and "upstream" in data and "providers" in data:
                found.append((f"{path.name}-{index}", data))
    return found


DOC_CONFIGS = _doc_configs()
DOC_SECRET = "whsec_" + base64.b64encode(b"a secret the docs' configs are read with").decode()


@pytest.mark.parametrize(("where", "config"), DOC_CONFIGS, ids=[w for w, _ in DOC_CONFIGS])
def test_configs_shown_in_the_docs_pass_both(
        where: str, config: dict[str, Any], validator: jsonschema.Draft202012Validator,
        base_dir: Path) -> None:
    assert schema_errors(validator, config) == []
    # One value for every variable a doc names: a Standard Webhooks secret ('whsec_' and
    # base64) is also a valid secret for every other scheme.
    env = {name: DOC_SECRET for name in re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}",
                                                  json.dumps(config))}
    assert loader_error(Case(where, config, env), base_dir) is None


def test_the_docs_show_a_complete_config() -> None:
    assert any(where.startswith("quickstart") for where, _ in DOC_CONFIGS)
