"""The ``providers`` mapping: each block merged over its preset, read by its declarations, its
path unique among the providers; and the warnings about settings that work but lose something.
"""

from __future__ import annotations

import copy
import re
from dataclasses import replace
from typing import Any

from sidecar.config.blocks import PROVIDER
from sidecar.config.model import (
    PROVIDER_KEY_PATTERN,
    REQUIRED_WITHOUT_PRESET,
    DestinationConfig,
    Mode,
    ProviderConfig,
    route_key,
)
from sidecar.config.presets import load_preset
from sidecar.config.reading import (
    FAILED,
    Load,
    Unusable,
    Values,
    allowed_keys,
    interpolated,
    read_block,
)
from sidecar.core.durations import format_duration
from sidecar.core.errors import ConfigError

_PROVIDER_KEY_RE = re.compile(PROVIDER_KEY_PATTERN)


def read_providers(raw: object, path: str, values: Values,
                   load: Load) -> tuple[ProviderConfig, ...]:
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(path, "at least one provider is required (a mapping of key → "
                          "settings)")
    routes: dict[str, str] = {}  # each provider's path → its key
    providers = [_provider_or_none(key, block, f"{path}.{key}", routes, load)
                 for key, block in raw.items()]
    complete = [provider for provider in providers if provider is not None]
    if len(complete) < len(providers):
        raise Unusable(path)
    return tuple(complete)


def _provider_or_none(key: object, raw: object, path: str, routes: dict[str, str],
                      load: Load) -> ProviderConfig | None:
    """The provider, or ``None`` when a problem was reported in it (or its path is another
    provider's)."""
    try:
        key = _provider_key(key, path)
        read = _provider(raw, path, load)
    except ConfigError as exc:
        load.report(exc)
        return None
    except Unusable:
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
    if provider.destinations:
        # Its own queue reaches no app: no upstream of its own, none named in metrics.
        provider = replace(provider, upstream=replace(provider.upstream, url=None),
                           routes=tuple(destination_route(provider, d)
                                        for d in provider.destinations))
    _warn_retention(provider, path, load)
    return provider


def destination_route(provider: ProviderConfig, destination: DestinationConfig
                      ) -> ProviderConfig:
    """A destination's route: its provider's queue settings, with the destination's app,
    limits and filter, under the key ``<provider>.<name>``."""
    return replace(provider, key=route_key(provider.key, destination.name),
                   destination=destination.name, upstream=destination.upstream,
                   delivery=destination.delivery, filter=destination.filter, destinations=(),
                   routes=())


def _warn_retention(provider: ProviderConfig, path: str, load: Load) -> None:
    timeout, deadline = provider.upstream.timeout, load.known("store.statement_timeout")
    own = f"{path}.upstream.timeout"
    key = own if load.known(own) is not None else "upstream.timeout"
    if (provider.mode is Mode.QUEUE and deadline is not None
            and provider.lease < timeout + deadline):
        load.warnings.append(
            f"{path}.lease ({format_duration(provider.lease)}) is shorter than {key} "
            f"+ store.statement_timeout ({format_duration(timeout + deadline)}): in queue mode "
            "a take's lease starts before its answer arrives, so a slow store leaves a forward "
            f"less than {key} before another worker may take the event again "
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


def _provider(raw: object, path: str, load: Load) -> Values:
    """The provider block's values (``FAILED`` where wrong), its preset merged under it."""
    data = interpolated(PROVIDER, allowed_keys(raw, path, PROVIDER.names, load), path,
                        "providers.<key>", load)
    assert isinstance(data, dict)
    preset_name = data.get("preset")
    if preset_name is FAILED:  # the preset is unknown: so is what the block is merged over
        raise Unusable(path)
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
            data[name] = FAILED
    return read_block(PROVIDER, data, path, "providers.<key>", load,
                      defaults={"max_body_bytes": load.read.get("max_body_bytes", FAILED)})


# --- provider blocks over their presets -------------------------------------------------------

_EVENT_ID_SOURCES = ("header", "json", "composite", "batch")


def _replaces(where: tuple[str, ...], value: dict[str, Any], preset: dict[str, Any]) -> bool:
    """Whether a user's block replaces the preset's whole: when it makes a different choice
    that the preset's other keys belong to (another event-id source, another signature format
    type, another handshake condition), merging would mix the two."""
    if where == ("handshake",):
        return "when" in value
    if where == ("event_type",):  # one source, header or json: a user's names its own
        return True
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
