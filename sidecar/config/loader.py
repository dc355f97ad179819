"""Load and strictly validate the YAML configuration. Every error names its key path.

What each mapping allows — its keys, their kinds (types, bounds, choices) and defaults — is read
from the declarations on the model's fields (``sidecar.config.model``), in the order declared.
This module adds only what a declaration cannot say: the steps in ``_STEPS``, each run right
after the key it is filed under (comparisons with earlier keys, values read with the environment
or the file system, the provider blocks merged over their presets). ``LOADER_ONLY_RULES`` lists
those the JSON Schema cannot express either.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

import yaml

from sidecar.config.declarations import NO_DEFAULT, Block, Nested, block_of
from sidecar.config.interpolate import interpolate
from sidecar.config.keyring import read_secret_file
from sidecar.config.model import (
    PROVIDER_KEY_PATTERN,
    REQUIRED_WITHOUT_PRESET,
    Config,
    ProviderConfig,
    SecretRef,
    StoreKind,
)
from sidecar.config.presets import load_preset
from sidecar.core.durations import format_duration
from sidecar.core.errors import ConfigError
from sidecar.core.eventid import parse_event_id_spec
from sidecar.core.handshake import parse_handshake_spec
from sidecar.core.signing import SignatureSpec, decode_secret, parse_signature_spec
from sidecar.core.signing.forward import decode_forward_secret

# The JSON Schema accepts configs that break these; the loader rejects them (docs/configuration.md
# lists them, and tests/deploy/cases.py shows each with a config).
LOADER_ONLY_RULES: Final[tuple[str, ...]] = (
    "a value written as ${VAR} is checked after interpolation (an unset variable without a "
    "default is an error)",
    "admin_listen must differ from listen (unless the port is 0)",
    "store.pool_min_size must not exceed store.pool_max_size",
    "providers.<key>.path must be unique across providers",
    "providers.<key>.lease must exceed upstream.timeout (for a batch provider, upstream.timeout "
    "+ inflight_wait); inflight_wait must not exceed the lease; retention must exceed the lease",
    "secrets: {env: NAME} must be set, {file: PATH} must be readable and not empty, and each "
    "secret must decode with the scheme's secret encoding (base64, hex, key prefixes)",
    "a block given next to a preset is merged over the preset first (an event_id with its own "
    "source, a signature.format of another type, and a handshake with its own when replace "
    "the preset's "
    "whole), and the merged block is checked (e.g. prefix added to a kv_list format)",
    "signature: {timestamp} in the message if and only if a timestamp is set; timestamp "
    "{from: signature} needs a format with timestamp_key, and timestamp_key needs it; {url} in "
    "the message if and only if url is set; append_query needs {url}; separators must differ "
    "and not contain each other; timestamp_key is not a signature key; format.algorithms names "
    "listed versions; at most one public-key algorithm; public_key_prefix when a scheme mixes "
    "shared secrets and public keys",
    "signature url: the port must be a valid number",
    "an integer key (sizes in bytes, pool sizes, statuses, max_length) written as a float such "
    "as 100.0 (a JSON Schema integer; the loader wants a YAML integer)",
    "numbers that do not fit a float (1e400 as text) are not durations",
    "trusted_proxies: a network's host bits must be zero (10.0.0.0/8, not 10.0.0.1/8), an IPv6 "
    "one must be a valid address and not IPv4-mapped",
)

TOP: Final = block_of(Config)
PROVIDER: Final = block_of(ProviderConfig)  # each value under ``providers`` (``_providers``)


def _by_path(block: Block, path: str = "") -> dict[str, Block]:
    """``block`` and the blocks nested in it, by key path."""
    found = {path: block}
    for name, key in block.keys.items():
        if isinstance(key.kind, Nested):
            found.update(_by_path(key.kind.block, f"{path}.{name}" if path else name))
    return found


# Each block under the key path its keys are documented with (the reference tables, the chart).
BLOCKS: Final[dict[str, Block]] = {**_by_path(TOP), "providers.<key>": PROVIDER}

_PROVIDER_KEY_RE = re.compile(PROVIDER_KEY_PATTERN)


def load_config_file(path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> Config:
    """Read, interpolate and validate a YAML config file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError("", f"cannot read config file {path}: {exc.strerror}") from exc
    return load_config_text(text, env=env, base_dir=Path(path).resolve().parent)


def load_config_text(
    text: str, env: Mapping[str, str] | None = None, base_dir: Path | None = None
) -> Config:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError("", f"invalid YAML: {exc}") from exc
    return parse_config(data, env=os.environ if env is None else env, base_dir=base_dir)


def parse_config(
    data: object, env: Mapping[str, str], base_dir: Path | None = None
) -> Config:
    _mapping(data, "", TOP.names)  # unknown keys first, before their values are interpolated
    load = _Load(env=env, base=base_dir or Path.cwd())
    values = _read(TOP, interpolate(data, env), "", "", load)
    if values["store"].kind == StoreKind.SQLITE:
        load.warnings.append("the SQLite store is correct for one host only; use PostgreSQL "
                             "for several replicas")
    return Config(**TOP.fill(values), warnings=tuple(load.warnings))


# --- reading a block by its declarations ------------------------------------------------------

@dataclass
class _Load:
    """What the steps read besides the value: the environment, the config file's folder, the
    warnings to report and, for the providers' steps, the top-level values."""

    env: Mapping[str, str]
    base: Path
    warnings: list[str] = field(default_factory=list)
    top: Mapping[str, Any] = field(default_factory=dict)


# A step: (the value as its kind read it, its key path, the block's values so far, the load)
# → the model's value, or a ConfigError.
Step = Callable[[Any, str, dict[str, Any], _Load], Any]


def _read(block: Block, raw: object, path: str, rule: str, load: _Load,
          defaults: Mapping[str, object] | None = None) -> dict[str, Any]:
    """``raw``'s values by key name, in declaration order. An absent key takes ``defaults``
    (values known only while loading) or its declared default, else it is ``None`` (or its
    kind's error when required); a nullable key set to null is ``None``. Each value then goes
    through the step filed under ``rule``.key, if any. Nested blocks are read the same way."""
    data = _mapping(raw, path, block.names)
    values: dict[str, Any] = {}
    for name, key in block.keys.items():
        where, key_rule = _join(path, name), _join(rule, name)
        if isinstance(key.kind, Nested):
            nested = key.kind.block
            values[name] = _build(nested, _read(nested, data.get(name), where, key_rule, load))
            continue
        if name in data:
            raw_value = data[name]
            if raw_value is None and key.nullable:
                values[name] = None
                continue
        elif defaults is not None and name in defaults:
            raw_value = defaults[name]
        elif key.default is not NO_DEFAULT:
            raw_value = key.default
        elif not key.required:
            values[name] = None
            continue
        else:
            raw_value = None
        value = key.kind.parse(raw_value, where)
        step = _STEPS.get(key_rule)
        values[name] = value if step is None else step(value, where, values, load)
    return values


def _build(block: Block, values: Mapping[str, Any]) -> Any:
    """The block's model filled with ``values``; without a model, the fields it fills."""
    fields = block.fill(values)
    return fields if block.model is None else block.model(**fields)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _sibling(path: str, name: str) -> str:
    return _join(path.rpartition(".")[0], name)


def _mapping(raw: object, path: str, allowed: frozenset[str]) -> dict[str, Any]:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(path, "must be a mapping")
    for key in raw:
        if key not in allowed:
            if key in REPLACED_KEYS:
                raise ConfigError(_join(path, str(key)), REPLACED_KEYS[key])
            raise ConfigError(_join(path, str(key)),
                              f"unknown key (allowed: {', '.join(sorted(allowed))})")
    return raw


# Keys a release removed, with what to write instead (a config written for it fails loudly).
REPLACED_KEYS: Final[Mapping[str, str]] = {
    "retryable_statuses": "replaced by final_statuses in 0.2: only a 2xx answer makes an "
                          "event done now, every other answer leaves it failed for the "
                          "provider's retry; list in final_statuses the non-2xx answers that "
                          "should be recorded and replayed instead (e.g. [400, 422])",
}


# --- the steps, filed under the key path they follow ------------------------------------------

def _admin_listen(admin: Any, path: str, values: dict[str, Any], load: _Load) -> Any:
    if admin == values["listen"] and admin.port != 0:
        raise ConfigError(path, "must differ from listen (admin routes are never served to "
                          "providers)")
    return admin


def _store_url(url: str, path: str, values: dict[str, Any], load: _Load) -> str:
    """A relative SQLite path is relative to the config file's folder."""
    if url.startswith("sqlite:///") and not Path(rel := url[len("sqlite:///"):]).is_absolute():
        return "sqlite:///" + str((load.base / rel).resolve())
    return url


def _pool_max_size(size: int, path: str, values: dict[str, Any], load: _Load) -> int:
    if values["pool_min_size"] > size:
        raise ConfigError(_sibling(path, "pool_min_size"), "must not exceed pool_max_size")
    return size


def _providers(raw: object, path: str, values: dict[str, Any],
               load: _Load) -> tuple[ProviderConfig, ...]:
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(path, "at least one provider is required (a mapping of key → "
                          "settings)")
    providers = []
    seen_paths: dict[str, str] = {}
    load = replace(load, top=values)  # upstream and max_body_bytes are read by now
    for key, block in raw.items():
        where = f"{path}.{key}"
        if not isinstance(key, str) or not _PROVIDER_KEY_RE.match(key):
            raise ConfigError(where, "provider keys are lower-case letters, digits, '-' and '_' "
                              "(at most 63); the key is part of the dedupe key")
        provider = _provider(key, block, where, load)
        if provider.path in seen_paths:
            raise ConfigError(f"{where}.path", f"{provider.path!r} is already used by provider "
                              f"{seen_paths[provider.path]!r}")
        seen_paths[provider.path] = key
        providers.append(provider)
        if provider.retry_window is not None and provider.retention < provider.retry_window:
            load.warnings.append(
                f"{where}.retention ({format_duration(provider.retention)}) is shorter than the "
                f"provider's retry window ({format_duration(provider.retry_window)}): a "
                "redelivery arriving after its row is deleted is forwarded to the app again")
    return tuple(providers)


def _provider(key: str, raw: object, path: str, load: _Load) -> ProviderConfig:
    data = _mapping(raw, path, PROVIDER.names)
    preset_name = data.get("preset")
    if preset_name is not None:
        if not isinstance(preset_name, str):
            raise ConfigError(f"{path}.preset", "must be a preset name")
        try:
            preset = load_preset(preset_name)
        except ConfigError as exc:
            raise ConfigError(f"{path}.preset", exc.message) from exc
        data = _deep_merge(preset, data)
    for name, declared in PROVIDER.keys.items():
        from_preset = name in REQUIRED_WITHOUT_PRESET
        if (declared.required or from_preset) and name not in data:
            hint = " (or name a preset)" if from_preset else ""
            raise ConfigError(f"{path}.{name}", f"is required{hint}")
    values = _read(PROVIDER, data, path, "providers.<key>", load,
                   defaults={"max_body_bytes": load.top["max_body_bytes"]})
    return ProviderConfig(key=key, **PROVIDER.fill(values))


def _signature(raw: object, path: str, values: dict[str, Any], load: _Load) -> SignatureSpec:
    return parse_signature_spec(raw, path)


def _event_id(raw: object, path: str, values: dict[str, Any], load: _Load) -> Any:
    return parse_event_id_spec(raw, path)


def _secrets(raw: object, path: str, values: dict[str, Any],
             load: _Load) -> tuple[SecretRef, ...]:
    if isinstance(raw, str | dict):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        raise ConfigError(path, "must be a non-empty list of secrets (a string, {env: NAME} or "
                          "{file: PATH}); several are accepted at once for rotation")
    refs = []
    for i, item in enumerate(raw):
        item_path = f"{path}[{i}]"
        source, value = _secret_value(item, item_path, load)
        if not value:
            raise ConfigError(item_path, f"secret from {source} is empty")
        refs.append(SecretRef(source=source,
                              key=decode_secret(values["signature"], value, item_path)))
    return tuple(refs)


def _secret_value(item: object, path: str, load: _Load) -> tuple[str, str]:
    if isinstance(item, str):
        return "inline", item
    spec = _mapping(item, path, frozenset({"env", "file"}))
    if len(spec) != 1:
        raise ConfigError(path, "give exactly one of env or file")
    if "env" in spec:
        name = spec["env"]
        if not isinstance(name, str) or name not in load.env:
            raise ConfigError(f"{path}.env", f"environment variable {name} is not set")
        return f"env:{name}", load.env[name]
    file = spec["file"]
    if not isinstance(file, str):
        raise ConfigError(f"{path}.file", "must be a path")
    file_path = Path(file) if Path(file).is_absolute() else load.base / file
    return f"file:{file_path}", read_secret_file(file_path, f"{path}.file")


def _signing_secrets(raw: object, path: str, values: dict[str, Any],
                     load: _Load) -> tuple[SecretRef, ...]:
    """upstream.signing_secrets: whsec_ secrets that sign every forward (none: unsigned)."""
    if isinstance(raw, str | dict):
        raw = [raw]
    if not isinstance(raw, list):
        raise ConfigError(path, "must be a list of secrets (a string, {env: NAME} or "
                          "{file: PATH}); every one signs each forward (rotation)")
    refs = []
    for i, item in enumerate(raw):
        item_path = f"{path}[{i}]"
        source, value = _secret_value(item, item_path, load)
        refs.append(SecretRef(source=source, key=decode_forward_secret(value, item_path)))
    return tuple(refs)


def _lease(lease: float, path: str, values: dict[str, Any], load: _Load) -> float:
    timeout = load.top["upstream"].timeout
    if lease <= timeout:
        raise ConfigError(path, f"must exceed upstream.timeout ({timeout:g}s), or a slow but "
                          "live first attempt would be taken over")
    return lease


def _inflight_wait(wait: float, path: str, values: dict[str, Any], load: _Load) -> float:
    lease, timeout = values["lease"], load.top["upstream"].timeout
    if wait > lease:
        raise ConfigError(path, "must not exceed the lease")
    if values["event_id"].is_batch and lease <= timeout + wait:
        raise ConfigError(_sibling(path, "lease"), f"must exceed upstream.timeout + "
                          f"inflight_wait ({timeout + wait:g}s) for a batch provider: an item's "
                          "lease runs while the delivery waits for its other items")
    return wait


def _retention(retention: float, path: str, values: dict[str, Any], load: _Load) -> float:
    if retention <= values["lease"]:
        raise ConfigError(path, "must exceed the lease")
    return retention


def _handshake(raw: object, path: str, values: dict[str, Any], load: _Load) -> Any:
    return parse_handshake_spec(raw, path)


def _replay_nonce(raw: object, path: str, values: dict[str, Any], load: _Load) -> Any:
    nonce = parse_event_id_spec(raw, path)
    if nonce.is_batch:
        raise ConfigError(path, "must be one value ({header: …} or {json: …})")
    return nonce


_STEPS: Final[dict[str, Step]] = {
    "admin_listen": _admin_listen,
    "upstream.signing_secrets": _signing_secrets,
    "store.url": _store_url,
    "store.pool_max_size": _pool_max_size,
    "providers": _providers,
    "providers.<key>.signature": _signature,
    "providers.<key>.event_id": _event_id,
    "providers.<key>.secrets": _secrets,
    "providers.<key>.lease": _lease,
    "providers.<key>.inflight_wait": _inflight_wait,
    "providers.<key>.retention": _retention,
    "providers.<key>.handshake": _handshake,
    "providers.<key>.replay_nonce": _replay_nonce,
}


# --- provider blocks over their presets -------------------------------------------------------

_EVENT_ID_SOURCES = ("header", "json", "composite", "batch")


def _replaces(where: tuple[str, ...], value: dict[str, Any], preset: dict[str, Any]) -> bool:
    """Whether a user's block replaces the preset's whole: when it makes a different choice
    that the preset's other keys belong to (another event-id source, another signature format
    type, another handshake condition), merging would mix the two."""
    if where == ("handshake",):
        return "when" in value
    if where == ("event_id",):
        return any(source in value for source in _EVENT_ID_SOURCES)
    if where == ("signature", "format"):
        return "type" in value and value["type"] != preset.get("type")
    return False


def _deep_merge(base: dict[str, Any], override: dict[str, Any],
                at: tuple[str, ...] = ()) -> dict[str, Any]:
    """The user's provider block over its preset; mappings merge (so one can change a
    tolerance or add a URL) unless ``_replaces`` says otherwise; everything else replaces."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        where = (*at, key)
        if (isinstance(value, dict) and isinstance(merged.get(key), dict)
                and not _replaces(where, value, merged[key])):
            merged[key] = _deep_merge(merged[key], value, where)
        else:
            merged[key] = value
    return merged
