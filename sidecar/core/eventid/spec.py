"""Where a provider's event id is, as its ``event_id:`` block declares it (a header, a JSON
path, a composite, a batch), parsed strictly into a frozen ``EventIdSpec``; every error names
the key path. (Also the ``replay_nonce:`` block, which is one value.)"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from sidecar.core.errors import ConfigError
from sidecar.core.fields import as_mapping, check_keys, get_header_names, get_str, join_path
from sidecar.core.jsonpath import JsonPath, Wildcard, parse_json_path


@dataclass(frozen=True, slots=True)
class IdPart:
    """One component of a composite id: a header or a JSON path (relative to the item, in a
    batch). ``optional`` parts that are absent contribute an empty string."""

    source: str
    header: str | None = None
    json_path: JsonPath | None = None
    optional: bool = False
    alternative_headers: tuple[str, ...] = ()  # read when ``header`` is absent, in order

    @property
    def headers(self) -> tuple[str, ...]:
        return () if self.header is None else (self.header, *self.alternative_headers)


@dataclass(frozen=True, slots=True)
class BatchSpec:
    """A body carrying several events (SendGrid, HubSpot, Adyen): ``items`` selects them
    (a path with ``[*]``), ``item_id`` takes each one's id, its JSON paths relative to the
    item."""

    items: JsonPath
    item_id: EventIdSpec

    @property
    def array_path(self) -> JsonPath:
        """The path to the array that ``[*]`` expands (the items path has exactly one)."""
        cut = self._wildcard_at()
        return JsonPath(self.items.text, self.items.steps[:cut])

    @property
    def item_path(self) -> JsonPath:
        """The path from one array element to the item."""
        cut = self._wildcard_at()
        return JsonPath(self.items.text, self.items.steps[cut + 1:])

    def _wildcard_at(self) -> int:
        wildcards = [i for i, step in enumerate(self.items.steps) if isinstance(step, Wildcard)]
        assert len(wildcards) == 1, "checked when the spec is parsed"
        return wildcards[0]


@dataclass(frozen=True, slots=True)
class EventIdSpec:
    source: str  # the header name, the JSON path, or a description, as written
    header: str | None = None
    json_path: JsonPath | None = None
    max_length: int = 255
    composite: tuple[IdPart, ...] = ()
    batch: BatchSpec | None = None
    # ``header`` is the first name the id header may have; these are read, in order, when it
    # is absent (``header: [X-Shopify-Webhook-Id, shopify-webhook-id]``).
    alternative_headers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        given = (self.header is not None, self.json_path is not None, bool(self.composite),
                 self.batch is not None)
        if sum(given) != 1:
            raise ValueError(
                "EventIdSpec needs exactly one of header, json_path, composite and batch"
            )

    @property
    def headers(self) -> tuple[str, ...]:
        """Every name the id header may have; the first one present is read."""
        return () if self.header is None else (self.header, *self.alternative_headers)

    @property
    def is_batch(self) -> bool:
        return self.batch is not None


_SOURCES = ("header", "json", "composite", "batch")


def _max_length(mapping: Mapping[str, object], path: str, default: int) -> int:
    max_length = mapping.get("max_length", default)
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1:
        raise ConfigError(join_path(path, "max_length"), "must be a positive integer")
    return max_length


def _header_or_json(mapping: Mapping[str, object], path: str) -> IdPart | None:
    """The one source a block names, ``header`` (one name or alternatives) or ``json`` (a
    path), as an ``IdPart``; ``None`` if it names neither. Ids and composite parts alike."""
    if "header" in mapping:
        names = get_header_names(mapping, "header", path)
        source = names[0] if len(names) == 1 else f"[{', '.join(names)}]"
        return IdPart(source, header=names[0], alternative_headers=names[1:])
    if "json" in mapping:
        text = get_str(mapping, "json", path)
        return IdPart(text, json_path=parse_json_path(text, join_path(path, "json")))
    return None


def _parse_part(data: object, path: str) -> IdPart:
    mapping = as_mapping(data, path)
    check_keys(mapping, path, optional=("header", "json", "optional"))
    optional = mapping.get("optional", False)
    if not isinstance(optional, bool):
        raise ConfigError(join_path(path, "optional"), "must be true or false")
    if "header" in mapping and "json" in mapping:
        raise ConfigError(join_path(path, "json"), "give header or json, not both")
    part = _header_or_json(mapping, path)
    if part is None:
        raise ConfigError(join_path(path, "header"), 'required (or json: "$.path")')
    return dataclasses.replace(part, optional=optional)


def _parse(data: object, path: str, *, allow_batch: bool, default_max: int) -> EventIdSpec:
    mapping = as_mapping(data, path)
    sources = _SOURCES if allow_batch else _SOURCES[:-1]
    check_keys(mapping, path, optional=(*sources, "max_length"))
    max_length = _max_length(mapping, path, default_max)
    given = [key for key in sources if key in mapping]
    if len(given) > 1:
        raise ConfigError(join_path(path, given[1]),
                          f"give one of {', '.join(sources)}, not several")
    single = _header_or_json(mapping, path)
    if single is not None:
        return EventIdSpec(single.source, header=single.header, json_path=single.json_path,
                           max_length=max_length, alternative_headers=single.alternative_headers)
    if "composite" in mapping:
        where = join_path(path, "composite")
        raw = mapping["composite"]
        if not isinstance(raw, list) or len(raw) < 2:
            raise ConfigError(where, "must be a list of at least two parts ({header: Name} or "
                              '{json: "$.path"}), joined with ":"')
        parts = tuple(_parse_part(item, f"{where}[{i}]") for i, item in enumerate(raw))
        if all(part.optional for part in parts):
            raise ConfigError(where, "at least one part must not be optional")
        source = ":".join(part.source for part in parts)
        return EventIdSpec(source, composite=parts, max_length=max_length)
    if "batch" in mapping:
        where = join_path(path, "batch")
        batch = as_mapping(mapping["batch"], where)
        check_keys(batch, where, required=("items", "item_id"))
        items_text = get_str(batch, "items", where)
        items = parse_json_path(items_text, join_path(where, "items"), wildcards=True)
        if sum(isinstance(step, Wildcard) for step in items.steps) != 1:
            raise ConfigError(join_path(where, "items"),
                              'must select the items with exactly one [*], e.g. "$[*]"')
        item_id = _parse(batch["item_id"], join_path(where, "item_id"), allow_batch=False,
                         default_max=max_length)
        return EventIdSpec(f"{items_text} -> {item_id.source}",
                           batch=BatchSpec(items, item_id), max_length=max_length)
    hint = 'json: "$.path", composite: [...]' + (", batch: {...}" if allow_batch else "")
    raise ConfigError(join_path(path, "header"), f"required (or {hint})")


def parse_event_id_spec(data: object, path: str) -> EventIdSpec:
    """``{header: Name}``, ``{json: "$.path"}``, ``{composite: [part, ...]}`` (parts joined
    with ``:``) or ``{batch: {items: "$[*]", item_id: {...}}}``; optional ``max_length``
    (default 255, per id)."""
    return _parse(data, path, allow_batch=True, default_max=255)
