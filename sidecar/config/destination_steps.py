"""The loader's steps for a provider's ``destinations:``: each destination read by its
declarations (``providers.<key>.destinations[]``), names unique, each with an app to reach;
and the provider keys that cannot stand beside destinations (``upstream``, ``delivery``,
forward mode)."""

from __future__ import annotations

from typing import Final

from sidecar.config.declarations import block_of
from sidecar.config.model import DestinationConfig, UpstreamConfig
from sidecar.config.reading import Load, Unusable, Values, build, read_items
from sidecar.core.errors import ConfigError
from sidecar.core.filter_config import parse_filter_spec
from sidecar.core.filtering import FilterSpec

DESTINATION: Final = block_of(DestinationConfig)
DESTINATION_RULE: Final = "providers.<key>.destinations[]"  # its keys' steps are filed under it


def read_destinations(raw: object, path: str, values: Values, load: Load
                      ) -> tuple[DestinationConfig, ...]:
    if raw is None or raw == []:
        return ()
    if not isinstance(raw, list):
        raise ConfigError(path, "must be a list of destinations, each a mapping with name and "
                          "upstream (url, and timeout, signing_secrets, …), delivery, filter")
    destinations: list[DestinationConfig] = []
    named: dict[str, str] = {}  # name → the path of the destination named so
    for where, read in read_items(DESTINATION, raw, path, DESTINATION_RULE, load):
        destination: DestinationConfig = build(DESTINATION, read)
        if destination.name in named:
            load.report(ConfigError(f"{where}.name", f"{destination.name!r} is already the name "
                                    f"of {named[destination.name]}; each destination needs its "
                                    "own (it names the destination's queue)"))
            continue
        named[destination.name] = where
        destinations.append(destination)
    if len(destinations) < len(raw):
        raise Unusable(path)
    return tuple(destinations)


def destination_upstream(upstream: UpstreamConfig, path: str, values: Values,
                         load: Load) -> UpstreamConfig:
    if upstream.url is None:
        raise ConfigError(f"{path}.url", "is required: this destination has no app (neither "
                          "its own upstream.url nor a top-level upstream.url)")
    return upstream


def destination_filter(raw: object, path: str, values: Values, load: Load) -> FilterSpec:
    """Type rules need the provider's event type (its preset's, or its own ``event_type``)."""
    spec = parse_filter_spec(raw, path)
    provider = path.partition(".destinations[")[0]
    if spec.uses_types and load.known(f"{provider}.event_type") is None:
        raise ConfigError(f"{path}.types", "this provider declares no event type: declare "
                          f"where it is with {provider}.event_type ({{header: Name}} or "
                          '{json: "$.type"}), or filter with when conditions only')
    return spec


def beside_destinations(key: str, path: str) -> ConfigError:
    """The error for a provider key that destinations replace, given beside them."""
    where = path.rpartition(".")[0]
    return ConfigError(path, f"{key} and destinations do not go together: each destination "
                       f"has its own {key} ({where}.destinations[].{key})")
