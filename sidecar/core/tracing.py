"""The tracing port: what the pipeline, the forwarder and the queue workers ask of a tracer, and
the tracer that does nothing (``NO_TRACER``), used whenever tracing is off.

Spans nest by the running task's context (as OpenTelemetry's do): a span opened while another
is open in the same task, or in a task started from it, is its child. The OpenTelemetry adapter
is ``sidecar.obs.tracing``; nothing here imports OpenTelemetry, so the core runs without it.

``StatementNote``: how a store call tells the span around it whether its statement went out
alone or in a batch (``sidecar.store.coalesce``), without a return value changing shape.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from contextlib import AbstractContextManager
from contextvars import ContextVar
from typing import Final, Protocol

AttributeValue = str | int | float | bool
Attributes = Mapping[str, AttributeValue]

TRACE_HEADERS: Final = ("traceparent", "tracestate")  # W3C Trace Context


class SpanKind(enum.Enum):
    SERVER = "server"  # a delivery as the provider sent it
    CLIENT = "client"  # a forward to the app
    CONSUMER = "consumer"  # a queue worker's attempt at an accepted event
    INTERNAL = "internal"  # a step: verify, claim, record


class Span(Protocol):
    """An open span (an OpenTelemetry span satisfies it as it is)."""

    def set_attribute(self, key: str, value: AttributeValue) -> None: ...


class Tracer(Protocol):
    """Opens spans. A span whose attributes include ``error.type`` ends with an error status."""

    @property
    def enabled(self) -> bool:
        """False: every method is a no-op, and callers may skip building attributes."""

    @property
    def db_system(self) -> str:
        """The store, as database spans name it (``postgresql``, ``sqlite``)."""

    def server(self, name: str, attributes: Attributes,
               parent: Mapping[str, str] | None) -> AbstractContextManager[Span]:
        """A new trace's root span for a request received, or — ``parent`` given — a child of
        the trace context its W3C headers carry (only from a trusted hop: the caller decides)."""

    def linked(self, name: str, kind: SpanKind, attributes: Attributes,
               link: str | None) -> AbstractContextManager[Span]:
        """A new trace's root span, linked to the span ``link`` (a W3C traceparent) names."""

    def span(self, name: str, kind: SpanKind = SpanKind.INTERNAL,
             attributes: Attributes | None = None) -> AbstractContextManager[Span]:
        """A child of the current span (a root span if none is open)."""

    def headers(self) -> dict[str, str]:
        """The current span's W3C Trace Context headers, for a request it sends (empty when
        off, or outside any span)."""


class _NoSpan:
    __slots__ = ()

    def set_attribute(self, key: str, value: AttributeValue) -> None:
        pass

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


_NO_SPAN: Final = _NoSpan()


class NoTracer:
    """Tracing off: one shared do-nothing span, no allocation per call."""

    __slots__ = ()
    enabled = False
    db_system = ""

    def server(self, name: str, attributes: Attributes,
               parent: Mapping[str, str] | None) -> _NoSpan:
        return _NO_SPAN

    def linked(self, name: str, kind: SpanKind, attributes: Attributes,
               link: str | None) -> _NoSpan:
        return _NO_SPAN

    def span(self, name: str, kind: SpanKind = SpanKind.INTERNAL,
             attributes: Attributes | None = None) -> _NoSpan:
        return _NO_SPAN

    def headers(self) -> dict[str, str]:
        return {}


NO_TRACER: Final[Tracer] = NoTracer()


class StatementNote:
    """Filled by the store for the span around one call: how many calls the statement that
    carried it served (1: alone; more: a coalesced batch). None: the store did not say."""

    __slots__ = ("batch_size",)

    def __init__(self) -> None:
        self.batch_size: int | None = None


# Set by whoever wants to know (the claim span) before a store call; the store reads it in the
# caller's own task, so it sees the caller's note. Unset (None): nobody asks, nothing is noted.
statement_note: ContextVar[StatementNote | None] = ContextVar("statement_note", default=None)
