"""The OTLP protobuf request (``ExportTraceServiceRequest``) written straight from span records
(``sidecar.obs.otel.SpanRecord``). The SDK's exporter builds a protobuf message object per span,
attribute and value; that was most of tracing's CPU (docs/benchmarks.md, "Tracing cost"). Here
each span is a few byte strings joined, and an attribute seen before (most are: a route, a
method, a store's name) is a dictionary lookup. What is sent decodes to the message the SDK's
encoder builds for the same spans (tests/unit/test_otlp.py compares them)."""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final

from sidecar.obs.otel import SpanRecord, error_status

log = logging.getLogger("sidecar.obs.otlp")  # the exporter's logger, one name for both modules

_KIND_NUMBERS: Final = {"internal": 1, "server": 2, "client": 3, "producer": 4, "consumer": 5}
_HAS_IS_REMOTE: Final = 0x100  # SpanFlags: the span says whether its parent is remote
_IS_REMOTE: Final = 0x200
_STATUS_ERROR: Final = 2
_CACHED_MAX: Final = 4096  # attributes remembered encoded; forgotten all at once past it

_pack_fixed64 = struct.Struct("<Q").pack
_pack_fixed32 = struct.Struct("<I").pack
_pack_double = struct.Struct("<d").pack
_pack_times = struct.Struct("<BQBQ").pack  # start and end: fields 7 and 8, fixed64


def _flags(remote: bool) -> bytes:
    """A span's or a link's flags field (16, fixed32): whether its parent is remote."""
    return b"\x85\x01" + _pack_fixed32(_HAS_IS_REMOTE | (_IS_REMOTE if remote else 0))


_UNSET_LOCAL: Final = b"\x7a\x00" + _flags(False)
_UNSET_REMOTE: Final = b"\x7a\x00" + _flags(True)


def _varint(value: int) -> bytes:
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _any_value(value: object) -> bytes:
    """An ``AnyValue``'s payload, as the SDK's encoder types values."""
    if isinstance(value, bool):
        return b"\x10" + (b"\x01" if value else b"\x00")
    if isinstance(value, str):
        return _field(1, value.encode("utf-8", "replace"))  # a lone surrogate: "?"
    if isinstance(value, int):
        return b"\x18" + _varint(value & 0xFFFFFFFFFFFFFFFF)  # int64: two's complement
    if isinstance(value, float):
        return b"\x21" + _pack_double(value)
    if isinstance(value, bytes):
        return _field(7, value)
    if isinstance(value, Sequence):
        return _field(5, b"".join(_field(1, _any_value(item)) for item in value))
    if isinstance(value, Mapping):
        return _field(6, b"".join(_field(1, _key_value(str(k), v)) for k, v in value.items()))
    if value is None:
        return b""
    raise TypeError(f"an attribute of type {type(value).__name__}")


def _key_value(key: str, value: object) -> bytes:
    return _field(1, key.encode()) + _field(2, _any_value(value))


def _key_values(number: int, items: Iterable[tuple[str, object]]) -> bytes:
    """Repeated ``KeyValue`` field ``number`` (a Resource's 1, an Event's 3, a Span's 9)."""
    return b"".join(_field(number, _key_value(key, value)) for key, value in items)


class Encoder:
    """Span records to the bytes of an ``ExportTraceServiceRequest`` for one resource and one
    instrumentation scope. Used by one thread (its cache is not locked)."""

    def __init__(self, resource: Mapping[str, object], resource_schema: str, scope: str,
                 scope_version: str | None = None, *,
                 unencodable: Callable[[int], None] | None = None) -> None:
        scope_bytes = _field(1, scope.encode())
        if scope_version:
            scope_bytes += _field(2, scope_version.encode())
        self._resource = _field(1, _key_values(1, resource.items()))  # Resource.attributes
        self._resource_schema = _field(3, resource_schema.encode()) if resource_schema else b""
        self._scope = _field(1, scope_bytes)
        self._cache: dict[tuple[str, type, object], bytes] = {}
        self._heads: dict[tuple[str, str], bytes] = {}
        self._unencodable = unencodable

    def encode(self, records: Iterable[SpanRecord]) -> bytes:
        """The request for ``records``; a span that cannot be encoded (an attribute of a type
        OTLP has no value for) is left out, logged and counted, never its batch."""
        encoded = []
        for record in records:
            try:
                encoded.append(_field(2, self._span(record)))
            except Exception:
                log.exception("span %r cannot be encoded; left out", record.name)
                if self._unencodable is not None:
                    self._unencodable(1)
        spans = b"".join(encoded)
        scope_spans = _field(2, self._scope + spans)
        return _field(1, self._resource + scope_spans + self._resource_schema)

    def _attribute(self, key: str, value: object) -> bytes:
        """A ``KeyValue`` field, remembered: most recur span after span."""
        cache_key = (key, type(value), value)
        try:
            return self._cache[cache_key]
        except KeyError:
            pass
        except TypeError:  # unhashable (a list from a sampler): not remembered
            return _field(9, _key_value(key, value))
        if len(self._cache) >= _CACHED_MAX:
            self._cache.clear()  # unique values (event ids) would fill it: start over
        encoded = self._cache[cache_key] = _field(9, _key_value(key, value))
        return encoded

    def _head(self, name: str, kind: str) -> bytes:
        """A span's name and kind fields, remembered: spans are named after a few steps."""
        try:
            return self._heads[name, kind]
        except KeyError:
            if len(self._heads) >= _CACHED_MAX:
                self._heads.clear()
            head = self._heads[name, kind] = (_field(5, name.encode("utf-8", "replace")) + b"\x30"
                                              + _varint(_KIND_NUMBERS[kind]))
            return head

    def _span(self, record: SpanRecord) -> bytes:
        parts = [b"\x0a\x10", record.trace_id.to_bytes(16, "big"),
                 b"\x12\x08", record.span_id.to_bytes(8, "big")]
        if record.state:
            parts.append(_field(3, record.state.to_header().encode("utf-8", "replace")))
        if record.parent:
            parts += (b"\x22\x08", record.parent.to_bytes(8, "big"))
        parts += (self._head(record.name, record.kind.value),
                  _pack_times(0x39, record.start, 0x41, record.end))
        attribute = self._attribute
        parts += [attribute(key, value) for key, value in record.attributes.items()]
        status = error_status(record)
        if (error := record.error) is not None:
            event = (_field(2, b"exception") + _key_values(3, (
                ("exception.type", error.qualname), ("exception.message", error.message),
                ("exception.stacktrace", error.stack), ("exception.escaped", "False"))))
            parts.append(_field(11, b"\x09" + _pack_fixed64(record.end) + event))
        for link in record.links:  # as the SDK's encoder writes them: no trace state
            context = link.context
            link_bytes = (b"\x0a\x10" + context.trace_id.to_bytes(16, "big")
                          + b"\x12\x08" + context.span_id.to_bytes(8, "big"))
            link_bytes += b"\x35" + _pack_fixed32(
                _HAS_IS_REMOTE | (_IS_REMOTE if context.is_remote else 0))
            parts.append(_field(13, link_bytes))
        if status is None:  # the usual end: an empty Status (unset), the span's flags
            parts.append(_UNSET_REMOTE if record.remote else _UNSET_LOCAL)
        else:
            message = _field(2, status.encode("utf-8", "replace")) if status else b""
            parts += (_field(15, message + b"\x18" + _varint(_STATUS_ERROR)),
                      _flags(record.remote))
        return b"".join(parts)
