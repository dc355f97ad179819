"""Load and strictly validate the YAML configuration. Every mistake is reported, not only the
first (``ConfigProblems``), each with its key path and, from a file, the line of its key; in the
order written. A value that is wrong is left out, and so is every check that needs it (no
cascade); a check comparing keys says which to change, and their defaults.

What each mapping allows — its keys, their kinds (types, bounds, choices) and defaults — is read
from the declarations on the model's fields (``sidecar.config.model``), in the order declared.
This module adds only what a declaration cannot say: the steps in ``_STEPS``, each run right
after the key it is filed under (comparisons with earlier keys, values read with the environment
or the file system, the provider blocks merged over their presets). ``LOADER_ONLY_RULES`` lists
those the JSON Schema cannot express either.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import enum
import ipaddress
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from sidecar.config.declarations import NO_DEFAULT, Block, Nested, Setting, block_of
from sidecar.config.interpolate import interpolate, references
from sidecar.config.keyring import read_secret_file
from sidecar.config.model import (
    PROVIDER_KEY_PATTERN,
    REQUIRED_WITHOUT_PRESET,
    Config,
    Mode,
    ProviderConfig,
    SecretRef,
    StoreKind,
)
from sidecar.config.presets import load_preset
from sidecar.config.problems import (
    ConfigProblems,
    Mark,
    Problem,
    did_you_mean,
    located,
    problems_of,
    read_yaml,
    with_suggestion,
)
from sidecar.core.durations import format_duration
from sidecar.core.errors import ConfigError
from sidecar.core.eventid import parse_event_id_spec
from sidecar.core.handshake import parse_handshake_spec
from sidecar.core.jsonpath import parse_json_path
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
    "providers.<key>.mode: queue is not available for a batch provider (event_id.batch); "
    "queue.max_retry_delay must not be shorter than queue.first_retry; queue.order_key must be "
    "a JSON path such as $.data.object.id (no wildcards)",
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
BLOCKS: Final[dict[str, Block]] = {**_by_path(TOP), **_by_path(PROVIDER, "providers.<key>")}

_PROVIDER_KEY_RE = re.compile(PROVIDER_KEY_PATTERN)


class Secrets(enum.Enum):
    """Which secrets a load reads. A secret it does not read is neither interpolated nor
    checked, and is left empty in the config (no keys, no admin token): a command that only
    touches the store (``events list``) then runs where the secrets are not in the
    environment, e.g. on a bastion host. Such a config must not serve."""

    ALL = "all"  # run, check-config, send
    SIGNING = "signing"  # upstream.signing_secrets only: a re-drive signs the forward it makes
    NONE = "none"  # the store settings (and the providers' other keys) are all it needs


# The keys each ``Secrets`` leaves unread, with the value they take instead.
_UNREAD: Final[Mapping[Secrets, Mapping[str, object]]] = {
    Secrets.ALL: {},
    Secrets.SIGNING: {"admin_token": None, "providers.<key>.secrets": ()},
    Secrets.NONE: {"admin_token": None, "upstream.signing_secrets": (),
                   "providers.<key>.secrets": ()},
}

# Keys whose step interpolates their values itself: the provider blocks (each read by
# ``_providers``), and the secrets, item by item (so an empty one can name its variable).
_OWN_INTERPOLATION: Final = frozenset({"providers", "upstream.signing_secrets",
                                       "providers.<key>.secrets"})


def load_config_file(path: str | os.PathLike[str], env: Mapping[str, str] | None = None, *,
                     secrets: Secrets = Secrets.ALL) -> Config:
    """Read, interpolate and validate a YAML config file. Every problem found is reported at
    once (``ConfigProblems``), each with the file, line and column of its key. ``secrets``
    says which secrets to read (all of them unless told otherwise)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigProblems([Problem("", f"cannot read config file {path}: "
                                          f"{exc.strerror}")]) from exc
    except UnicodeDecodeError as exc:
        raise ConfigProblems([Problem("", f"config file {path} is not UTF-8 text")]) from exc
    return load_config_text(text, env=env, base_dir=Path(path).resolve().parent,
                            source=os.fspath(path), secrets=secrets)


def load_config_text(
    text: str, env: Mapping[str, str] | None = None, base_dir: Path | None = None,
    source: str = "", *, secrets: Secrets = Secrets.ALL,
) -> Config:
    """As ``load_config_file``, for YAML text; ``source`` names it in messages."""
    document = read_yaml(text, source)
    return _parse(document.data, os.environ if env is None else env, base_dir,
                  document.marks, source, secrets)


def parse_config(
    data: object, env: Mapping[str, str], base_dir: Path | None = None, *,
    secrets: Secrets = Secrets.ALL,
) -> Config:
    """The config for ``data`` as the YAML loader produces it; ``ConfigProblems`` lists every
    mistake, in the order written."""
    return _parse(data, env, base_dir, {}, "", secrets)


def _parse(data: object, env: Mapping[str, str], base_dir: Path | None,
           marks: Mapping[str, Mark], source: str, secrets: Secrets) -> Config:
    load = _Load(env=env, base=base_dir or Path.cwd(), unread=_UNREAD[secrets])
    try:
        config = _config(data, load)
    except ConfigError as exc:  # the file is not a mapping: nothing else can be read
        load.report(exc)
        config = None
    if config is None:
        raise ConfigProblems(located(load.problems, data, marks), source)
    return config


def _config(data: object, load: _Load) -> Config | None:
    """The config, or ``None`` when a problem was reported."""
    values = _read(TOP, _interpolated(TOP, data, "", "", load), "", "", load)
    if load.problems:
        return None
    if values["store"].kind == StoreKind.SQLITE:
        load.warnings.append("the SQLite store is correct for one host only; use PostgreSQL "
                             "for several replicas")
    if (values["admin_token"] is None and "admin_token" not in load.unread
            and not _is_loopback(values["admin_listen"].host)):
        load.warnings.append(f"admin_listen ({values['admin_listen']}) is not loopback and "
                             "admin_token is unset: /admin/* answers only requests from "
                             "loopback (403 otherwise); /healthz, /readyz and /metrics answer "
                             "everyone")
    return Config(**TOP.fill(values), warnings=tuple(load.warnings),
                  unread_secrets=frozenset(load.unread))


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


# --- reading a block by its declarations ------------------------------------------------------

class _Failed:
    """A value that could not be read (its problem is reported already)."""

    def __repr__(self) -> str:
        return "FAILED"


_FAILED: Final = _Failed()


class _Unusable(Exception):
    """A value cannot be read: its problems are reported already, or it needs a value that
    could not be read. Nothing more is reported for it (no cascade of noise)."""


class _Values(dict[str, Any]):
    """A block's values so far by key name; reading one that failed raises ``_Unusable``, so a
    step that needs it is skipped. (``get`` returns ``_FAILED`` as it is.)"""

    def __getitem__(self, name: str) -> Any:
        value = super().__getitem__(name)
        if value is _FAILED:
            raise _Unusable(name)
        return value

    @property
    def complete(self) -> bool:
        return not any(value is _FAILED for value in self.values())

    def known(self, name: str) -> Any:
        """The value of ``name``; ``None`` if it could not be read (a check comparing with it
        is then skipped)."""
        value = self.get(name)
        return None if value is _FAILED else value


@dataclass
class _Load:
    """What the steps read besides the value: the environment, the config file's folder, the
    keys left unread (``Secrets``) and every value read so far by key path; what the load
    found: warnings and problems."""

    env: Mapping[str, str]
    base: Path
    unread: Mapping[str, object] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    read: dict[str, Any] = field(default_factory=dict)

    def report(self, error: ConfigError) -> None:
        self.problems.extend(with_suggestion(p) for p in problems_of(error))

    def known(self, path: str) -> Any:
        """The value read for the key ``path`` (e.g. ``upstream.timeout``); ``None`` if it
        could not be read (a check comparing with it is then skipped)."""
        value = self.read.get(path)
        return None if value is _FAILED else value


# A step: (the value as its kind read it, its key path, the block's values so far, the load)
# → the model's value, or a ConfigError (reported), or ``_Unusable`` (skipped).
Step = Callable[[Any, str, _Values, _Load], Any]


def _read(block: Block, raw: object, path: str, rule: str, load: _Load,
          defaults: Mapping[str, object] | None = None) -> _Values:
    """``raw``'s values by key name, in declaration order. An absent key takes ``defaults``
    (values known only while loading) or its declared default, else it is ``None`` (or its
    kind's error when required); a nullable key set to null is ``None``. Each value then goes
    through the step filed under ``rule``.key, if any. Nested blocks are read the same way.
    A key whose value is wrong is reported and ``_FAILED``; the others are still read."""
    data = _mapping(raw, path, block.names, load)
    values = _Values()
    for name, key in block.keys.items():
        where, key_rule = _join(path, name), _join(rule, name)
        try:
            if key_rule in load.unread:  # a secret this load does not read (``Secrets``)
                values[name] = load.unread[key_rule]
            else:
                values[name] = _value(key, data, name, where, key_rule, values, load,
                                      defaults)
        except ConfigError as exc:
            load.report(exc)
            values[name] = _FAILED
        except _Unusable:
            values[name] = _FAILED
        load.read[where] = dict.get(values, name)
    return values


def _value(key: Setting, data: Mapping[str, Any], name: str, where: str, rule: str,
           values: _Values, load: _Load, defaults: Mapping[str, object] | None) -> Any:
    if isinstance(key.kind, Nested):
        nested = key.kind.block
        inner = _read(nested, data.get(name), where, rule, load)
        if not inner.complete:
            raise _Unusable(where)
        return _build(nested, inner)
    if name in data:
        raw_value = data[name]
        if raw_value is None and key.nullable:
            return None
    elif defaults is not None and name in defaults:
        raw_value = defaults[name]
    elif key.default is not NO_DEFAULT:
        raw_value = key.default
    elif not key.required:
        return None
    else:
        raw_value = None
    if raw_value is _FAILED:
        raise _Unusable(where)
    value = key.kind.parse(raw_value, where)
    step = _STEPS.get(rule)
    return value if step is None else step(value, where, values, load)


def _build(block: Block, values: Mapping[str, Any]) -> Any:
    """The block's model filled with ``values``; without a model, the fields it fills."""
    fields = block.fill(values)
    return fields if block.model is None else block.model(**fields)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _sibling(path: str, name: str) -> str:
    return _join(path.rpartition(".")[0], name)


def _mapping(raw: object, path: str, allowed: frozenset[str], load: _Load) -> dict[str, Any]:
    """``raw``'s allowed keys; each other key is reported (and left out)."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(path, "must be a mapping")
    known = {}
    for key, value in raw.items():
        if key in allowed:
            known[key] = value
        else:
            load.report(ConfigError(_join(path, str(key)), _unknown_key(key, allowed)))
    return known


def _unknown_key(key: object, allowed: frozenset[str]) -> str:
    if key in REPLACED_KEYS:
        return REPLACED_KEYS[str(key)]
    names = ", ".join(sorted(allowed))
    suggestion = did_you_mean(str(key), allowed)
    if suggestion is None:
        return f"unknown key (allowed: {names})"
    return f"unknown key; did you mean {suggestion}? (allowed: {names})"


# Keys a release removed, with what to write instead (a config written for it fails loudly).
REPLACED_KEYS: Final[Mapping[str, str]] = {
    "retryable_statuses": "replaced by final_statuses in 0.2: only a 2xx answer makes an "
                          "event done now, every other answer leaves it failed for the "
                          "provider's retry; list in final_statuses the non-2xx answers that "
                          "should be recorded and replayed instead (e.g. [400, 422])",
}


def _interpolated(block: Block, raw: object, path: str, rule: str, load: _Load) -> object:
    """``raw`` with ``${VAR}`` interpolated in the values of the block's keys, key by key (an
    unset variable is reported and its key ``_FAILED``). Unknown keys are left as they are
    (they are reported, never read); so are keys this load leaves unread, and those whose step
    interpolates them (``_OWN_INTERPOLATION``)."""
    if not isinstance(raw, dict):
        return raw
    out: dict[Any, Any] = {}
    for name, value in raw.items():
        key, where, key_rule = block.keys.get(name), _join(path, str(name)), _join(rule, str(name))
        if key is None or key_rule in _OWN_INTERPOLATION or key_rule in load.unread:
            out[name] = value
        elif isinstance(key.kind, Nested):
            out[name] = _interpolated(key.kind.block, value, where, key_rule, load)
        else:
            try:
                out[name] = interpolate(value, load.env, where)
            except ConfigError as exc:
                load.report(exc)
                out[name] = _FAILED
    return out


# --- what to change when keys disagree --------------------------------------------------------

# Keys whose default is never printed (their values are secrets or may carry one).
_SECRET_LIKE: Final = re.compile(r"secret|token|password|passwd|credential|private|api_?key",
                                 re.IGNORECASE)


def _is_secret(rule: str) -> bool:
    """Whether the key at ``rule`` (``store.url``, ``providers.<key>.secrets``) holds or may
    hold a secret: by its name, or its field kept out of ``repr``."""
    if _SECRET_LIKE.search(rule):
        return True
    parent, _, name = rule.rpartition(".")
    block = BLOCKS.get(parent)
    key = block.keys.get(name) if block is not None else None
    if block is None or key is None or block.model is None or key.fills is None:
        return False
    hidden = {f.name for f in dataclasses.fields(block.model) if not f.repr}
    return key.fills in hidden


def _default_of(rule: str, preset: object = None) -> str:
    """`` (default 60s)`` for the key at ``rule`` (a provider's: its preset's value when the
    preset sets it); empty for a key without a default or holding a secret."""
    if _is_secret(rule):
        return ""
    parent, _, name = rule.rpartition(".")
    if parent == "providers.<key>" and isinstance(preset, str):
        with contextlib.suppress(ConfigError):
            preset_value = load_preset(preset).get(name)
            if preset_value is not None:
                return f" ({preset} preset: {preset_value})"
    block = BLOCKS.get(parent)
    key = block.keys.get(name) if block is not None else None
    if key is None or key.default is NO_DEFAULT:
        return ""
    return f" (default {key.default})"


def _fix(*changes: tuple[str, str, str], preset: object = None) -> str:
    """``; to fix, raise providers.stripe.lease (default 60s) or lower upstream.timeout
    (default 10s)`` for changes (verb, key path, rule)."""
    parts = [f"{verb} {where}{_default_of(rule, preset)}" for verb, where, rule in changes]
    return "; to fix, " + " or ".join(parts)


# --- the steps, filed under the key path they follow ------------------------------------------

def _admin_listen(admin: Any, path: str, values: _Values, load: _Load) -> Any:
    if admin == values.known("listen") and admin.port != 0:
        raise ConfigError(path, "must differ from listen (admin routes are never served to "
                          "providers)" + _fix(("change", "admin_listen", "admin_listen"),
                                              ("change", "listen", "listen")))
    return admin


def _store_url(url: str, path: str, values: _Values, load: _Load) -> str:
    """A relative SQLite path is relative to the config file's folder."""
    if url.startswith("sqlite:///") and not Path(rel := url[len("sqlite:///"):]).is_absolute():
        return "sqlite:///" + str((load.base / rel).resolve())
    return url


def _pool_max_size(size: int, path: str, values: _Values, load: _Load) -> int:
    minimum = values.known("pool_min_size")
    if minimum is not None and minimum > size:
        raise ConfigError(_sibling(path, "pool_min_size"), f"must not exceed pool_max_size "
                          f"({minimum} > {size})" + _fix(
                              ("lower", _sibling(path, "pool_min_size"), "store.pool_min_size"),
                              ("raise", path, "store.pool_max_size")))
    return size


def _providers(raw: object, path: str, values: _Values,
               load: _Load) -> tuple[ProviderConfig, ...]:
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(path, "at least one provider is required (a mapping of key → "
                          "settings)")
    routes: dict[str, str] = {}  # each provider's path → its key
    providers = [_provider_or_none(key, block, f"{path}.{key}", routes, load)
                 for key, block in raw.items()]
    complete = [provider for provider in providers if provider is not None]
    if len(complete) < len(providers):
        raise _Unusable(path)
    return tuple(complete)


def _provider_or_none(key: object, raw: object, path: str, routes: dict[str, str],
                      load: _Load) -> ProviderConfig | None:
    """The provider, or ``None`` when a problem was reported in it (or its path is another
    provider's)."""
    try:
        key = _provider_key(key, path)
        read = _provider(raw, path, load)
    except ConfigError as exc:
        load.report(exc)
        return None
    except _Unusable:
        return None
    route = read.get("path")
    if isinstance(route, str) and route in routes:
        load.report(ConfigError(f"{path}.path", f"{route!r} is already used by provider "
                                f"{routes[route]!r}"))
        return None
    if isinstance(route, str):
        routes[route] = key
    if not read.complete:
        return None
    provider = ProviderConfig(key=key, **PROVIDER.fill(read))
    _warn_retention(provider, path, load)
    return provider


def _warn_retention(provider: ProviderConfig, path: str, load: _Load) -> None:
    timeout, deadline = load.known("upstream.timeout"), load.known("store.statement_timeout")
    if (provider.mode is Mode.QUEUE and timeout is not None and deadline is not None
            and provider.lease < timeout + deadline):
        load.warnings.append(
            f"{path}.lease ({format_duration(provider.lease)}) is shorter than upstream.timeout "
            f"+ store.statement_timeout ({format_duration(timeout + deadline)}): in queue mode "
            "a take's lease starts before its answer arrives, so a slow store leaves a forward "
            "less than upstream.timeout before another worker may take the event again "
            "(attempt + 1)")
    if provider.mode is Mode.QUEUE and provider.retention < provider.queue.max_age:
        load.warnings.append(
            f"{path}.retention ({format_duration(provider.retention)}) is shorter than "
            f"queue.max_age ({format_duration(provider.queue.max_age)}): an event that dies "
            "late is deleted by retention soon after, with little time to re-drive it")
    if provider.retry_window is not None and provider.retention < provider.retry_window:
        load.warnings.append(
            f"{path}.retention ({format_duration(provider.retention)}) is shorter than the "
            f"provider's retry window ({format_duration(provider.retry_window)}): a "
            "redelivery arriving after its row is deleted is forwarded to the app again")


def _provider_key(key: object, path: str) -> str:
    if isinstance(key, str) and _PROVIDER_KEY_RE.match(key):
        return key
    hint = ""
    if isinstance(key, str) and _PROVIDER_KEY_RE.match(key.lower()):
        hint = f"; did you mean {key.lower()}?"
    raise ConfigError(path, "provider keys are lower-case letters, digits, '-' and '_' "
                      f"(at most 63); the key is part of the dedupe key{hint}")


def _provider(raw: object, path: str, load: _Load) -> _Values:
    """The provider block's values (``_FAILED`` where wrong), its preset merged under it."""
    data = _interpolated(PROVIDER, _mapping(raw, path, PROVIDER.names, load), path,
                         "providers.<key>", load)
    assert isinstance(data, dict)
    preset_name = data.get("preset")
    if preset_name is _FAILED:  # the preset is unknown: so is what the block is merged over
        raise _Unusable(path)
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
            load.report(ConfigError(f"{path}.{name}", f"is required{hint}"))
            data[name] = _FAILED
    return _read(PROVIDER, data, path, "providers.<key>", load,
                 defaults={"max_body_bytes": load.read.get("max_body_bytes", _FAILED)})


def _signature(raw: object, path: str, values: _Values, load: _Load) -> SignatureSpec:
    return parse_signature_spec(raw, path)


def _event_id(raw: object, path: str, values: _Values, load: _Load) -> Any:
    return parse_event_id_spec(raw, path)


def _secrets(raw: object, path: str, values: _Values,
             load: _Load) -> tuple[SecretRef, ...]:
    if isinstance(raw, str | dict):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        raise ConfigError(path, "must be a non-empty list of secrets (a string, {env: NAME} or "
                          "{file: PATH}); several are accepted at once for rotation")
    found = _secret_values(raw, path, load)
    signature = values["signature"]
    return _decoded(found, path, load, lambda value, where: decode_secret(signature, value,
                                                                          where))


def _signing_secrets(raw: object, path: str, values: _Values,
                     load: _Load) -> tuple[SecretRef, ...]:
    """upstream.signing_secrets: whsec_ secrets that sign every forward (none: unsigned)."""
    if isinstance(raw, str | dict):
        raw = [raw]
    if not isinstance(raw, list):
        raise ConfigError(path, "must be a list of secrets (a string, {env: NAME} or "
                          "{file: PATH}); every one signs each forward (rotation)")
    return _decoded(_secret_values(raw, path, load), path, load, decode_forward_secret)


def _secret_values(raw: list[Any], path: str, load: _Load) -> list[tuple[str, str, str]]:
    """(item path, source, secret) for each item; every item is checked (each problem
    reported) before any is decoded."""
    found: list[tuple[str, str, str]] = []
    for i, item in enumerate(raw):
        try:
            found.append((f"{path}[{i}]", *_secret_value(item, f"{path}[{i}]", load)))
        except ConfigError as exc:
            load.report(exc)
    if len(found) < len(raw):
        raise _Unusable(path)
    return found


def _decoded(found: list[tuple[str, str, str]], path: str, load: _Load,
             decode: Callable[[str, str], bytes]) -> tuple[SecretRef, ...]:
    refs = []
    for item_path, source, value in found:
        try:
            refs.append(SecretRef(source=source, key=decode(value, item_path)))
        except ConfigError as exc:
            load.report(exc)
    if len(refs) < len(found):
        raise _Unusable(path)
    return tuple(refs)


_SECRET_SHAPE: Final = "a secret is a string, {env: NAME} or {file: PATH}"


def _secret_value(item: object, path: str, load: _Load) -> tuple[str, str]:
    """(its source, the secret) for one item of ``secrets``, interpolated. Messages name a
    variable or a file, never a value, nor an unknown key (it might be the secret, written as a
    key)."""
    if isinstance(item, str):
        source, value = "inline", _interpolated_text(item, path, load)
        if not value and references(item):
            raise ConfigError(path, f"secret from {item} is empty: {_why_empty(item, load)}")
    elif not isinstance(item, dict):
        raise ConfigError(path, "must be a string, {env: NAME} or {file: PATH}")
    elif unknown := [key for key in item if key not in ("env", "file")]:
        suggestion = did_you_mean(str(unknown[0]), ("env", "file"))
        hint = f"; did you mean {suggestion}?" if suggestion else ""
        raise ConfigError(path, f"has a key other than env or file (not shown: it may be the "
                          f"secret){hint}; {_SECRET_SHAPE}")
    elif len(item) != 1:
        raise ConfigError(path, "give exactly one of env or file")
    elif "env" in item:
        where = f"{path}.env"
        source, value = _secret_from_env(_interpolated_text(item["env"], where, load), where,
                                         load)
    else:
        where = f"{path}.file"
        source, value = _secret_from_file(_interpolated_text(item["file"], where, load), where,
                                          load)
    if not value:
        raise ConfigError(path, f"secret from {source} is empty")
    return source, value


def _interpolated_text(value: object, path: str, load: _Load) -> Any:
    """``value`` interpolated when it is a string; as it is otherwise (its check says why)."""
    return interpolate(value, load.env, path) if isinstance(value, str) else value


def _why_empty(text: str, load: _Load) -> str:
    """Why ``text``, made of ``${VAR}`` references only, interpolated to nothing: each
    variable's state (text that became empty has no literal part and no non-empty default)."""
    why = []
    for name, default in references(text):
        if name not in load.env:
            why.append(f"{name} is not set, and its default is empty")
        elif not load.env[name] and default is not None:
            why.append(f"{name} is empty, and so is its default")
        else:
            why.append(f"{name} is set but empty")
    return "; ".join(why)


def _secret_from_env(name: object, path: str, load: _Load) -> tuple[str, str]:
    if not isinstance(name, str):
        raise ConfigError(path, "must be the name of an environment variable")
    if name not in load.env:
        raise ConfigError(path, f"environment variable {name} is not set")
    return f"env:{name}", load.env[name]


def _secret_from_file(file: object, path: str, load: _Load) -> tuple[str, str]:
    if not isinstance(file, str):
        raise ConfigError(path, "must be a path")
    file_path = Path(file) if Path(file).is_absolute() else load.base / file
    return f"file:{file_path}", read_secret_file(file_path, path)


def _lease(lease: float, path: str, values: _Values, load: _Load) -> float:
    timeout = load.known("upstream.timeout")
    if timeout is not None and lease <= timeout:
        raise ConfigError(path, f"must exceed upstream.timeout ({format_duration(timeout)}; "
                          f"the lease is {format_duration(lease)}), or a slow but live first "
                          "attempt would be taken over" + _fix(
                              ("raise", path, "providers.<key>.lease"),
                              ("lower", "upstream.timeout", "upstream.timeout"),
                              preset=values.get("preset")))
    return lease


def _inflight_wait(wait: float, path: str, values: _Values, load: _Load) -> float:
    lease, preset = values.known("lease"), values.get("preset")
    lease_path = _sibling(path, "lease")
    if lease is None:
        return wait
    if wait > lease:
        raise ConfigError(path, f"must not exceed the lease ({format_duration(wait)} > "
                          f"{format_duration(lease)})" + _fix(
                              ("lower", path, "providers.<key>.inflight_wait"),
                              ("raise", lease_path, "providers.<key>.lease"), preset=preset))
    timeout, event_id = load.known("upstream.timeout"), values.known("event_id")
    if timeout is not None and event_id is not None and event_id.is_batch and (
            lease <= timeout + wait):
        raise ConfigError(lease_path, f"must exceed upstream.timeout + inflight_wait "
                          f"({format_duration(timeout)} + {format_duration(wait)} = "
                          f"{format_duration(timeout + wait)}; the lease is "
                          f"{format_duration(lease)}) for a batch provider: an item's lease "
                          "runs while the delivery waits for its other items" + _fix(
                              ("raise", lease_path, "providers.<key>.lease"),
                              ("lower", path, "providers.<key>.inflight_wait"),
                              ("lower", "upstream.timeout", "upstream.timeout"), preset=preset))
    return wait


def _retention(retention: float, path: str, values: _Values, load: _Load) -> float:
    lease = values.known("lease")
    if lease is not None and retention <= lease:
        raise ConfigError(path, f"must exceed the lease ({format_duration(retention)} ≤ "
                          f"{format_duration(lease)})" + _fix(
                              ("raise", path, "providers.<key>.retention"),
                              ("lower", _sibling(path, "lease"), "providers.<key>.lease"),
                              preset=values.get("preset")))
    return retention


def _handshake(raw: object, path: str, values: _Values, load: _Load) -> Any:
    return parse_handshake_spec(raw, path)


def _mode(mode: Mode, path: str, values: _Values, load: _Load) -> Mode:
    event_id = values.known("event_id")
    if mode is Mode.QUEUE and event_id is not None and event_id.is_batch:
        raise ConfigError(path, "queue is not available for a batch provider (event_id.batch): "
                          "its items share one delivery; use forward")
    return mode


def _order_key(raw: object, path: str, values: _Values, load: _Load) -> Any:
    return parse_json_path(raw, path)


def _max_retry_delay(delay: float, path: str, values: _Values, load: _Load) -> float:
    first = values.known("first_retry")
    if first is not None and delay < first:
        raise ConfigError(path, f"must not be shorter than first_retry "
                          f"({format_duration(delay)} < {format_duration(first)})")
    return delay


def _replay_nonce(raw: object, path: str, values: _Values, load: _Load) -> Any:
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
    "providers.<key>.mode": _mode,
    "providers.<key>.queue.order_key": _order_key,
    "providers.<key>.queue.max_retry_delay": _max_retry_delay,
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
