"""Load and strictly validate the YAML configuration. Every error names its key path."""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from sidecar.config.interpolate import interpolate
from sidecar.config.keyring import read_secret_file
from sidecar.config.model import (
    Address,
    Config,
    MaintenanceConfig,
    ProviderConfig,
    SecretRef,
    StoreConfig,
    UpstreamConfig,
)
from sidecar.config.presets import load_preset
from sidecar.core.durations import format_duration, parse_duration
from sidecar.core.errors import ConfigError
from sidecar.core.eventid import parse_event_id_spec
from sidecar.core.handshake import parse_handshake_spec
from sidecar.core.signing import decode_secret, parse_signature_spec

DEFAULT_MAX_BODY_BYTES = 1024 * 1024
DEFAULT_RETRYABLE = ("3xx", 408, 425, 429, "5xx")

_TOP_KEYS = {
    "listen", "admin_listen", "max_body_bytes", "upstream", "store", "providers",
    "shutdown_timeout", "log", "maintenance", "admin_token", "body_read_timeout",
}
_MAINTENANCE_KEYS = {"interval", "retention_batch_size", "secrets_reload_interval"}
_UPSTREAM_KEYS = {
    "url", "timeout", "connect_timeout", "max_connections", "keepalive_timeout",
    "max_response_bytes",
}
_STORE_KEYS = {
    "url", "pool_min_size", "pool_max_size", "acquire_timeout", "statement_timeout",
    "lock_timeout", "statement_cache_size", "session_settings",
}
_LOG_KEYS = {"level", "format"}
_PROVIDER_KEYS = {
    "path", "preset", "description", "secrets", "lease", "inflight_wait", "retention",
    "max_body_bytes", "signature", "event_id", "handshake", "retryable_statuses",
    "on_payload_mismatch", "store_payload", "retry_window", "replay_nonce",
}
_PROVIDER_KEY_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
# ASCII digits only: \d and str.isdigit() also accept other scripts' digits.
_SIZE_RE = re.compile(r"^\s*([0-9]+)\s*(B|KB|KiB|MB|MiB|GB|GiB)?\s*$")
_PORT_RE = re.compile(r"^[0-9]{1,5}$")
_SIZE_UNITS = {
    None: 1, "B": 1, "KB": 1000, "KiB": 1024, "MB": 1000**2, "MiB": 1024**2,
    "GB": 1000**3, "GiB": 1024**3,
}


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
    top = _mapping(data, "", _TOP_KEYS)
    top = _mapping(interpolate(top, env), "", _TOP_KEYS)
    base = base_dir or Path.cwd()
    warnings: list[str] = []

    listen = _address(top.get("listen", "0.0.0.0:8080"), "listen")
    admin = _address(top.get("admin_listen", "127.0.0.1:9090"), "admin_listen")
    if listen == admin and listen.port != 0:
        raise ConfigError("admin_listen", "must differ from listen (admin routes are never served "
                          "to providers)")
    max_body = _size(top.get("max_body_bytes", DEFAULT_MAX_BODY_BYTES), "max_body_bytes")
    upstream = _upstream(top.get("upstream"), "upstream")
    store = _store(top.get("store", {}), "store", base)
    log = _mapping(top.get("log", {}), "log", _LOG_KEYS)
    level = _choice(log.get("level", "info"), "log.level", ("debug", "info", "warning", "error"))
    fmt = _choice(log.get("format", "auto"), "log.format", ("auto", "json", "console"))
    shutdown = parse_duration(top.get("shutdown_timeout", "30s"), "shutdown_timeout")
    body_read_timeout = parse_duration(top.get("body_read_timeout", "10s"), "body_read_timeout")
    if body_read_timeout <= 0:
        raise ConfigError("body_read_timeout", "must be positive")
    maintenance = _maintenance(top.get("maintenance", {}), "maintenance")
    admin_token = top.get("admin_token")
    if admin_token is not None and (not isinstance(admin_token, str) or len(admin_token) < 16):
        raise ConfigError("admin_token", "must be a string of at least 16 characters")

    raw_providers = top.get("providers")
    if not isinstance(raw_providers, dict) or not raw_providers:
        raise ConfigError("providers", "at least one provider is required (a mapping of key → "
                          "settings)")
    providers = []
    seen_paths: dict[str, str] = {}
    for key, raw in raw_providers.items():
        path = f"providers.{key}"
        if not isinstance(key, str) or not _PROVIDER_KEY_RE.match(key):
            raise ConfigError(path, "provider keys are lower-case letters, digits, '-' and '_' "
                              "(at most 63); the key is part of the dedupe key")
        provider = _provider(key, raw, path, max_body, upstream, base, env)
        if provider.path in seen_paths:
            raise ConfigError(f"{path}.path", f"{provider.path!r} is already used by provider "
                              f"{seen_paths[provider.path]!r}")
        seen_paths[provider.path] = key
        providers.append(provider)
        if provider.retry_window is not None and provider.retention < provider.retry_window:
            warnings.append(
                f"providers.{key}.retention ({format_duration(provider.retention)}) is shorter "
                f"than the provider's retry window ({format_duration(provider.retry_window)}): "
                "a redelivery arriving "
                "after its row is deleted is forwarded to the app again")
    if store.kind == "sqlite":
        warnings.append("the SQLite store is correct for one host only; use PostgreSQL for "
                        "several replicas")
    return Config(
        listen=listen, admin_listen=admin, upstream=upstream, store=store,
        providers=tuple(providers), shutdown_timeout=shutdown, log_level=level, log_format=fmt,
        maintenance=maintenance, admin_token=admin_token, body_read_timeout=body_read_timeout,
        warnings=tuple(warnings),
    )


def _provider(
    key: str, raw: object, path: str, default_max_body: int, upstream: UpstreamConfig,
    base: Path, env: Mapping[str, str],
) -> ProviderConfig:
    data = _mapping(raw, path, _PROVIDER_KEYS)
    preset_name = data.get("preset")
    if preset_name is not None:
        if not isinstance(preset_name, str):
            raise ConfigError(f"{path}.preset", "must be a preset name")
        try:
            preset = load_preset(preset_name)
        except ConfigError as exc:
            raise ConfigError(f"{path}.preset", exc.message) from exc
        data = _deep_merge(preset, data)
    for required in ("path", "signature", "event_id", "secrets"):
        if required not in data:
            hint = " (or name a preset)" if required in ("signature", "event_id") else ""
            raise ConfigError(f"{path}.{required}", f"is required{hint}")
    if not isinstance(data.get("description", ""), str):
        raise ConfigError(f"{path}.description", "must be a string")
    route = data["path"]
    if not isinstance(route, str) or not route.startswith("/") or "{" in route:
        raise ConfigError(f"{path}.path", "must be a literal URL path starting with '/'")
    signature = parse_signature_spec(data["signature"], f"{path}.signature")
    event_id = parse_event_id_spec(data["event_id"], f"{path}.event_id")
    secrets = _secrets(data["secrets"], f"{path}.secrets", signature, base, env)
    lease = parse_duration(data.get("lease", "60s"), f"{path}.lease")
    if lease <= upstream.timeout:
        raise ConfigError(f"{path}.lease", f"must exceed upstream.timeout ({upstream.timeout:g}s),"
                          " or a slow but live first attempt would be taken over")
    inflight_wait = parse_duration(data.get("inflight_wait", "5s"), f"{path}.inflight_wait")
    if inflight_wait > lease:
        raise ConfigError(f"{path}.inflight_wait", "must not exceed the lease")
    if event_id.is_batch and lease <= upstream.timeout + inflight_wait:
        raise ConfigError(f"{path}.lease", f"must exceed upstream.timeout + inflight_wait "
                          f"({upstream.timeout + inflight_wait:g}s) for a batch provider: an "
                          "item's lease runs while the delivery waits for its other items")
    retention = parse_duration(data.get("retention", "7d"), f"{path}.retention")
    if retention <= lease:
        raise ConfigError(f"{path}.retention", "must exceed the lease")
    max_body = _size(data.get("max_body_bytes", default_max_body), f"{path}.max_body_bytes")
    retryable = _statuses(data.get("retryable_statuses", list(DEFAULT_RETRYABLE)),
                          f"{path}.retryable_statuses")
    mismatch = _choice(data.get("on_payload_mismatch", "duplicate"), f"{path}.on_payload_mismatch",
                       ("duplicate", "reject"))
    handshake = (parse_handshake_spec(data["handshake"], f"{path}.handshake")
                 if data.get("handshake") is not None else None)
    store_payload = _bool(data.get("store_payload", False), f"{path}.store_payload")
    replay_nonce = (parse_event_id_spec(data["replay_nonce"], f"{path}.replay_nonce")
                    if data.get("replay_nonce") is not None else None)
    if replay_nonce is not None and replay_nonce.is_batch:
        raise ConfigError(f"{path}.replay_nonce", "must be one value ({header: …} or {json: …})")
    retry_window = (parse_duration(data["retry_window"], f"{path}.retry_window")
                    if data.get("retry_window") is not None else None)
    return ProviderConfig(
        key=key, path=route, preset=preset_name, signature=signature, event_id=event_id,
        secrets=secrets, lease=lease, inflight_wait=inflight_wait, retention=retention,
        max_body_bytes=max_body, retryable_statuses=retryable, on_payload_mismatch=mismatch,
        handshake=handshake, store_payload=store_payload, retry_window=retry_window,
        replay_nonce=replay_nonce,
    )


def _secrets(
    raw: object, path: str, signature: Any, base: Path, env: Mapping[str, str]
) -> tuple[SecretRef, ...]:
    if isinstance(raw, str | dict):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        raise ConfigError(path, "must be a non-empty list of secrets (a string, {env: NAME} or "
                          "{file: PATH}); several are accepted at once for rotation")
    refs = []
    for i, item in enumerate(raw):
        item_path = f"{path}[{i}]"
        source, value = _secret_value(item, item_path, base, env)
        if not value:
            raise ConfigError(item_path, f"secret from {source} is empty")
        refs.append(SecretRef(source=source, key=decode_secret(signature, value, item_path)))
    return tuple(refs)


def _secret_value(
    item: object, path: str, base: Path, env: Mapping[str, str]
) -> tuple[str, str]:
    if isinstance(item, str):
        return "inline", item
    spec = _mapping(item, path, {"env", "file"})
    if len(spec) != 1:
        raise ConfigError(path, "give exactly one of env or file")
    if "env" in spec:
        name = spec["env"]
        if not isinstance(name, str) or name not in env:
            raise ConfigError(f"{path}.env", f"environment variable {name} is not set")
        return f"env:{name}", env[name]
    file = spec["file"]
    if not isinstance(file, str):
        raise ConfigError(f"{path}.file", "must be a path")
    file_path = Path(file) if Path(file).is_absolute() else base / file
    return f"file:{file_path}", read_secret_file(file_path, f"{path}.file")


def _maintenance(raw: object, path: str) -> MaintenanceConfig:
    data = _mapping(raw, path, _MAINTENANCE_KEYS)
    interval = parse_duration(data.get("interval", "60s"), f"{path}.interval")
    reload = parse_duration(data.get("secrets_reload_interval", "10s"),
                            f"{path}.secrets_reload_interval")
    for key, value in (("interval", interval), ("secrets_reload_interval", reload)):
        if value <= 0:
            raise ConfigError(f"{path}.{key}", "must be positive")
    return MaintenanceConfig(
        interval=interval,
        retention_batch_size=_int(data.get("retention_batch_size", 500),
                                  f"{path}.retention_batch_size", 1),
        secrets_reload_interval=reload,
    )


def _upstream(raw: object, path: str) -> UpstreamConfig:
    data = _mapping(raw, path, _UPSTREAM_KEYS)
    url = data.get("url")
    if (not isinstance(url, str) or urlsplit_scheme(url) not in ("http", "https")
            or not url.partition("://")[2].split("/", 1)[0]):
        raise ConfigError(f"{path}.url", "must be an http:// or https:// URL of the app, "
                          "with a host")
    return UpstreamConfig(
        url=url.rstrip("/"),
        timeout=parse_duration(data.get("timeout", "10s"), f"{path}.timeout"),
        connect_timeout=parse_duration(data.get("connect_timeout", "2s"),
                                       f"{path}.connect_timeout"),
        max_connections=_int(data.get("max_connections", 100), f"{path}.max_connections", 1),
        keepalive_timeout=parse_duration(data.get("keepalive_timeout", "4s"),
                                         f"{path}.keepalive_timeout"),
        max_response_bytes=_size(data.get("max_response_bytes", 64 * 1024),
                                 f"{path}.max_response_bytes"),
    )


def urlsplit_scheme(url: str) -> str:
    scheme, sep, _ = url.partition("://")
    return scheme.lower() if sep else ""


def _store(raw: object, path: str, base: Path) -> StoreConfig:
    data = _mapping(raw, path, _STORE_KEYS)
    url = data.get("url", "sqlite:///./webhook-sidecar.db")
    if not isinstance(url, str):
        raise ConfigError(f"{path}.url", "must be a string")
    scheme = urlsplit_scheme(url)
    if url.startswith("sqlite:///") and len(url) > len("sqlite:///"):
        rel = url[len("sqlite:///"):]
        if not Path(rel).is_absolute():
            url = "sqlite:///" + str((base / rel).resolve())
    elif scheme not in ("postgresql", "postgres"):
        raise ConfigError(f"{path}.url", "must be sqlite:///PATH or postgresql://…")
    pool_min = _int(data.get("pool_min_size", 1), f"{path}.pool_min_size", 0)
    pool_max = _int(data.get("pool_max_size", 10), f"{path}.pool_max_size", 1)
    if pool_min > pool_max:
        raise ConfigError(f"{path}.pool_min_size", "must not exceed pool_max_size")
    return StoreConfig(
        url=url, pool_min_size=pool_min, pool_max_size=pool_max,
        acquire_timeout=parse_duration(data.get("acquire_timeout", "2s"),
                                       f"{path}.acquire_timeout"),
        statement_timeout=parse_duration(data.get("statement_timeout", "5s"),
                                         f"{path}.statement_timeout"),
        lock_timeout=parse_duration(data.get("lock_timeout", "2s"), f"{path}.lock_timeout"),
        statement_cache_size=_int(data.get("statement_cache_size", 100),
                                  f"{path}.statement_cache_size", 0),
        session_settings=_bool(data.get("session_settings", True), f"{path}.session_settings"),
    )


def _address(raw: object, path: str) -> Address:
    if not isinstance(raw, str) or ":" not in raw:
        raise ConfigError(path, "must be HOST:PORT, e.g. 0.0.0.0:8080")
    host, _, port_text = raw.rpartition(":")
    host = host.strip("[]")
    if not host or not _PORT_RE.match(port_text) or not 0 <= int(port_text) <= 65535:
        raise ConfigError(path, f"{raw!r} is not HOST:PORT with a port from 0 to 65535")
    return Address(host, int(port_text))


def _size(raw: object, path: str) -> int:
    if isinstance(raw, bool):
        raise ConfigError(path, "must be a size in bytes, e.g. 1048576 or 1MiB")
    if isinstance(raw, int):
        value = raw
    elif isinstance(raw, str) and (match := _SIZE_RE.match(raw)):
        value = int(match.group(1)) * _SIZE_UNITS[match.group(2)]
    else:
        raise ConfigError(path, "must be a size in bytes, e.g. 1048576 or 1MiB")
    if value <= 0:
        raise ConfigError(path, "must be positive")
    return value


def _int(raw: object, path: str, minimum: int) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < minimum:
        raise ConfigError(path, f"must be an integer ≥ {minimum}")
    return raw


def _bool(raw: object, path: str) -> bool:
    if not isinstance(raw, bool):
        raise ConfigError(path, "must be true or false")
    return raw


def _choice(raw: object, path: str, choices: tuple[str, ...]) -> str:
    if raw not in choices:
        raise ConfigError(path, f"must be one of {', '.join(choices)}")
    return str(raw)


def _statuses(raw: object, path: str) -> frozenset[int]:
    if not isinstance(raw, list):
        raise ConfigError(path, "must be a list of statuses (e.g. 429) or classes (e.g. '5xx')")
    statuses: set[int] = set()
    for i, item in enumerate(raw):
        if isinstance(item, int) and not isinstance(item, bool) and 100 <= item <= 599:
            statuses.add(item)
        elif isinstance(item, str) and re.fullmatch(r"[1-5]xx", item):
            start = int(item[0]) * 100
            statuses.update(range(start, start + 100))
        else:
            raise ConfigError(f"{path}[{i}]", "must be a status 100–599 or a class like '5xx'")
    if any(200 <= s < 300 for s in statuses):
        raise ConfigError(path, "a 2xx answer is never retryable")
    return frozenset(statuses)


def _mapping(raw: object, path: str, allowed: set[str]) -> dict[str, Any]:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(path, "must be a mapping")
    for key in raw:
        if key not in allowed:
            where = f"{path}.{key}" if path else str(key)
            raise ConfigError(where, f"unknown key (allowed: {', '.join(sorted(allowed))})")
    return raw


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
