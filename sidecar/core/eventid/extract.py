"""The event ids a delivery carries, read by its ``EventIdSpec``: one, or one per item of a
batch body.

Called only after the signature is verified, so the body is trusted to be the provider's,
but it is still parsed defensively: every failure is an ``EventIdError``.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sidecar.core.body import Body, JsonValue, NotJson
from sidecar.core.errors import EventIdError
from sidecar.core.eventid.spec import EventIdSpec, IdPart
from sidecar.core.headers import first_header

# Control characters, lone surrogates (not valid UTF-8) and line/paragraph separators.
_FORBIDDEN = frozenset(("Cc", "Cs", "Zl", "Zp"))


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
    value: JsonValue  # the item as parsed


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
    item_path = batch.item_path  # a property that builds the path: once, not per item
    for position, element in enumerate(array):
        present, item = item_path.lookup(element)
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
