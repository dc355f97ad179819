"""The provider's stable event id: from a header, a small JSON-path subset of the body, a
composite of several of those, or one per item of a batch body.

Called only after the signature is verified, so the body is trusted to be the provider's,
but it is still parsed defensively: every failure is an ``EventIdError``.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sidecar.core.body import Body, NotJson
from sidecar.core.errors import ConfigError, EventIdError
from sidecar.core.fields import as_mapping, check_keys, get_header_names, get_str, join_path
from sidecar.core.headers import first_header
from sidecar.core.jsonpath import JsonPath, Wildcard, parse_json_path

# Control characters, lone surrogates (not valid UTF-8) and line/paragraph separators.
_FORBIDDEN = frozenset(("Cc", "Cs", "Zl", "Zp"))


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


def _names_source(names: tuple[str, ...]) -> str:
    return names[0] if len(names) == 1 else f"[{', '.join(names)}]"


def _parse_part(data: object, path: str) -> IdPart:
    mapping = as_mapping(data, path)
    check_keys(mapping, path, optional=("header", "json", "optional"))
    optional = mapping.get("optional", False)
    if not isinstance(optional, bool):
        raise ConfigError(join_path(path, "optional"), "must be true or false")
    if "header" in mapping and "json" in mapping:
        raise ConfigError(join_path(path, "json"), "give header or json, not both")
    if "header" in mapping:
        names = get_header_names(mapping, "header", path)
        return IdPart(_names_source(names), header=names[0], optional=optional,
                      alternative_headers=names[1:])
    if "json" in mapping:
        text = get_str(mapping, "json", path)
        return IdPart(text, json_path=parse_json_path(text, join_path(path, "json")),
                      optional=optional)
    raise ConfigError(join_path(path, "header"), 'required (or json: "$.path")')


def _parse(data: object, path: str, *, allow_batch: bool, default_max: int) -> EventIdSpec:
    mapping = as_mapping(data, path)
    sources = _SOURCES if allow_batch else _SOURCES[:-1]
    check_keys(mapping, path, optional=(*sources, "max_length"))
    max_length = _max_length(mapping, path, default_max)
    given = [key for key in sources if key in mapping]
    if len(given) > 1:
        raise ConfigError(join_path(path, given[1]),
                          f"give one of {', '.join(sources)}, not several")
    if "header" in mapping:
        names = get_header_names(mapping, "header", path)
        return EventIdSpec(_names_source(names), header=names[0], max_length=max_length,
                           alternative_headers=names[1:])
    if "json" in mapping:
        text = get_str(mapping, "json", path)
        return EventIdSpec(text, json_path=parse_json_path(text, join_path(path, "json")),
                           max_length=max_length)
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


def _checked(spec: EventIdSpec, value: str) -> str:
    # The id becomes a database key, a log field and an upstream header value.
    if not value.strip():
        raise EventIdError("invalid_event_id", "empty")
    if len(value) > spec.max_length:
        raise EventIdError("invalid_event_id", f"longer than {spec.max_length}")
    if any(unicodedata.category(char) in _FORBIDDEN for char in value):
        raise EventIdError("invalid_event_id", "contains control characters")
    return value


def _document(body: Body) -> Callable[[], object]:
    """The body's JSON, parsed on first use (a header-only id never parses the body)."""

    def get() -> object:
        try:
            return body.json()
        except NotJson:
            raise EventIdError("invalid_json", "body is not JSON") from None

    return get


def _given(value: object) -> Callable[[], object]:
    """An already parsed document (a batch item)."""
    return lambda: value


def _escape(text: str) -> str:
    # Parts are joined with ":", so a ":" inside a part is escaped (and "%", to keep the
    # encoding reversible): two different part lists never give the same id.
    return text.replace("%", "%25").replace(":", "%3A")


def _part_text(part: IdPart, document: Callable[[], object],
               headers: Mapping[str, str]) -> str | None:
    if part.header is not None:
        return first_header(headers, part.headers)
    assert part.json_path is not None
    found, node = part.json_path.lookup(document())
    if not found or node is None:
        return None
    if isinstance(node, bool):
        return "true" if node else "false"
    if isinstance(node, int | str):
        return str(node)
    raise EventIdError("invalid_event_id", f"{part.source} is not a string or integer")


def _extract(spec: EventIdSpec, document: Callable[[], object], headers: Mapping[str, str]) -> str:
    if spec.header is not None:
        value = first_header(headers, spec.headers)
        if value is None:
            raise EventIdError("missing_event_id", f"no {' or '.join(spec.headers)} header")
        return _checked(spec, value)
    if spec.json_path is not None:
        found, node = spec.json_path.lookup(document())
        if not found or node is None:
            raise EventIdError("missing_event_id", f"nothing at {spec.source}")
        if isinstance(node, int) and not isinstance(node, bool):
            return _checked(spec, str(node))
        if not isinstance(node, str):
            raise EventIdError("invalid_event_id", f"{spec.source} is not a string or integer")
        return _checked(spec, node)
    texts = []
    for part in spec.composite:
        text = _part_text(part, document, headers)
        if text is None:
            if not part.optional:
                raise EventIdError("missing_event_id", f"nothing at {part.source}")
            text = ""
        texts.append(_escape(text))
    return _checked(spec, ":".join(texts))


def extract_event_id(spec: EventIdSpec, body: Body | bytes, headers: Mapping[str, str]) -> str:
    """Return the event id; raise ``EventIdError`` (``missing_event_id``, ``invalid_json``,
    ``invalid_event_id``). Integers become their decimal text; ``null`` counts as missing.
    A batch spec has several ids: it raises ``ValueError`` (use ``batch_items``)."""
    if spec.batch is not None:
        raise ValueError("a batch event_id spec has several ids: use batch_items")
    return _extract(spec, _document(Body.of(body)), headers)


@dataclass(frozen=True, slots=True)
class BatchItem:
    event_id: str
    position: int  # index in the array the items path's ``[*]`` expands
    value: object  # the item as parsed


def batch_items(spec: EventIdSpec, body: Body | bytes,
                headers: Mapping[str, str]) -> list[BatchItem]:
    """The items of a batch delivery with their ids and positions, in body order; a repeated
    id keeps its first item. A batch without items, or an item without a usable id, raises
    ``EventIdError`` for the whole delivery."""
    assert spec.batch is not None
    batch = spec.batch
    found, array = batch.array_path.lookup(_document(Body.of(body))())
    if not found or not isinstance(array, list) or not array:
        raise EventIdError("missing_event_id", f"no items at {batch.items.text}")
    items: dict[str, BatchItem] = {}
    for position, element in enumerate(array):
        present, item = batch.item_path.lookup(element)
        if not present:
            continue
        try:
            event_id = _extract(batch.item_id, _given(item), headers)
        except EventIdError as exc:
            raise EventIdError(exc.reason, f"item {position}: {exc.detail}") from None
        items.setdefault(event_id, BatchItem(event_id, position, item))
    if not items:
        raise EventIdError("missing_event_id", f"no items at {batch.items.text}")
    return list(items.values())


def delivery_items(spec: EventIdSpec, body: Body | bytes,
                   headers: Mapping[str, str]) -> list[BatchItem]:
    """Every event a delivery carries: one item (position 0) for a plain spec, one per item of
    a batch. Raises ``EventIdError`` as ``extract_event_id`` and ``batch_items`` do."""
    if spec.batch is not None:
        return batch_items(spec, body, headers)
    return [BatchItem(extract_event_id(spec, body, headers), 0, None)]
