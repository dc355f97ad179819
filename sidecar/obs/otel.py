"""The tracing port (``core.tracing.Tracer``) on the OpenTelemetry SDK. Imported only when tracing
is on (``sidecar.obs.tracing.build_tracer``): the ``otel`` extra is optional.

The delivery path keeps each span as a light record (``SpanRecord``: ids, times, a plain dict of
attributes) in a context variable of its own, and puts it, once ended, on a bounded queue; the
SDK's span objects (``ReadableSpan``) are built from the records in the export thread, just
before the exporter encodes them. The SDK's own span machinery (attribute validation, its
context, a lock and processor calls per span) cost the proxy more CPU than the rest of a
delivery (docs/benchmarks.md, "Tracing cost"). The SDK still decides what it owns: the sampler
(called for each trace's root; a child shares its parent's decision, as the parent-based samplers
decide), the id generator, the resource and the exporter.

An exporter that is down or slow never delays a delivery: a finished span is put on the bounded
queue and the delivery goes on; a background thread exports. Spans that cannot be kept are
dropped and counted (``Dropped``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from contextvars import ContextVar, Token
from types import TracebackType
from typing import Final

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, Decision, ParentBased
from opentelemetry.trace import Link, SpanContext, TraceFlags, TraceState
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from sidecar.core.tracing import Attributes, AttributeValue, Span, SpanKind
from sidecar.obs.span_queue import SpanQueue

KINDS: Final = {
    SpanKind.SERVER: trace.SpanKind.SERVER,
    SpanKind.CLIENT: trace.SpanKind.CLIENT,
    SpanKind.CONSUMER: trace.SpanKind.CONSUMER,
    SpanKind.INTERNAL: trace.SpanKind.INTERNAL,
}
SCOPE: Final = "webhook-sidecar"
# Samplers that sample every trace without a parent, adding nothing to it.
_ALWAYS_ON: Final = frozenset(
    sampler.get_description() for sampler in (ALWAYS_ON, ParentBased(ALWAYS_ON)))

log = logging.getLogger("sidecar.obs.otel")


# OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT unset: a string attribute is cut to this many characters (the
# SDK keeps any length; a sender's 8 KiB User-Agent would go out whole in every span).
DEFAULT_VALUE_LENGTH_LIMIT: Final = 4096
_STACK_LIMIT: Final = 32768  # characters of a formatted stack kept on a span


def clean(value: AttributeValue, limit: int) -> AttributeValue:
    """``value`` as a span may keep it: a string valid UTF-8 (a byte aiohttp decoded with
    ``surrogateescape``, or any lone surrogate, becomes U+FFFD) and at most ``limit``
    characters; other types as they are."""
    if type(value) is not str:
        return value
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError:
            try:
                raw = value.encode("utf-8", "surrogateescape")  # the bytes as received
            except UnicodeEncodeError:
                raw = value.encode("utf-8", "surrogatepass")
            value = raw.decode("utf-8", "replace")
    return value if len(value) <= limit else value[:limit]


class ErrorNote:
    """An exception that escaped a span, as the span keeps it: names and text only, so the
    exception (its traceback's frames, and what they hold: a body) is freed when the span
    ends, not when it is exported."""

    __slots__ = ("message", "name", "qualname", "stack")

    def __init__(self, exc: BaseException, limit: int) -> None:
        self.name = type(exc).__name__
        self.qualname = type(exc).__qualname__
        self.message = str(clean(str(exc), limit))
        self.stack = str(clean("".join(traceback.format_exception(exc)), _STACK_LIMIT))


class SpanRecord:
    """A span while the delivery path holds it: what the export thread needs to build the SDK's
    ``ReadableSpan``, nothing validated or copied twice. ``parent``: the parent's span id, 0 for
    a root; ``remote``: that parent came from another process."""

    __slots__ = ("attributes", "end", "error", "flags", "kind", "limit", "links", "name",
                 "parent", "queue", "remote", "span_id", "start", "state", "token", "trace_id")

    def __init__(self, name: str, kind: SpanKind, trace_id: int, span_id: int, flags: int,
                 state: TraceState | None, parent: int, remote: bool,
                 attributes: dict[str, AttributeValue], links: Sequence[Link],
                 limit: int = DEFAULT_VALUE_LENGTH_LIMIT) -> None:
        self.name = name
        self.kind = kind
        self.trace_id = trace_id
        self.span_id = span_id
        self.flags = flags
        self.state = state
        self.parent = parent
        self.remote = remote
        for key, value in attributes.items():
            if type(value) is str:
                attributes[key] = clean(value, limit)
        self.attributes = attributes
        self.limit = limit
        self.links = links
        self.start = time.time_ns()
        self.end = 0
        self.error: ErrorNote | None = None  # an exception escaped it
        self.queue: SpanQueue | None = None  # where it goes when it ends: sampled only
        self.token: Token[SpanRecord | None] | None = None

    # A class, not a generator-based context manager: a third of the cost per span.
    def __enter__(self) -> SpanRecord:
        self.token = _current.set(self)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if isinstance(exc, Exception):  # as the SDK does: the exception on the span, an error
            self.error = ErrorNote(exc, self.limit)
        if self.token is not None:
            _current.reset(self.token)
        self.end = time.time_ns()
        if self.queue is not None:
            self.queue.put(self)

    def set_attribute(self, key: str, value: AttributeValue) -> None:
        self.attributes[key] = clean(value, self.limit) if type(value) is str else value

    @property
    def sampled(self) -> bool:
        return bool(self.flags & TraceFlags.SAMPLED)

    def traceparent(self) -> str:
        return f"00-{self.trace_id:032x}-{self.span_id:016x}-{self.flags:02x}"


# The open span of the running task (children: tasks started from it see it too).
_current: ContextVar[SpanRecord | None] = ContextVar("sidecar_span", default=None)


class OtelTracer:
    """``core.tracing.Tracer`` on an SDK ``TracerProvider`` (its sampler, id generator and
    resource) and a ``SpanQueue`` added to it. W3C Trace Context in and out."""

    enabled = True

    def __init__(self, provider: TracerProvider, queue: SpanQueue, db_system: str, *,
                 value_length_limit: int = DEFAULT_VALUE_LENGTH_LIMIT) -> None:
        self._provider = provider
        self._limit = value_length_limit
        self._queue = queue
        self._sampler = provider.sampler
        # The default sampler samples every new trace as it is: no need to ask it each time.
        self._always = self._sampler.get_description() in _ALWAYS_ON
        self._ids = provider.id_generator
        # W3C Trace Context level 2: the SDK flags trace ids its generator drew at random.
        self._random = TraceFlags.RANDOM_TRACE_ID if self._ids.is_trace_id_random() else 0
        self._propagator = TraceContextTextMapPropagator()
        self._db_system = db_system
        self._root = Context()  # no parent: a new trace, whatever the running task holds

    @property
    def db_system(self) -> str:
        return self._db_system

    def server(self, name: str, attributes: Attributes,
               parent: Mapping[str, str] | None) -> contextlib.AbstractContextManager[Span]:
        if parent is not None:
            context = self._propagator.extract(parent)
            remote = trace.get_current_span(context).get_span_context()
            if remote.is_valid:
                return self._open(self._root_record(name, SpanKind.SERVER, attributes, context,
                                                    remote, ()))
        return self._open(self._root_record(name, SpanKind.SERVER, attributes, self._root,
                                            None, ()))

    def linked(self, name: str, kind: SpanKind, attributes: Attributes,
               link: str | None) -> contextlib.AbstractContextManager[Span]:
        links: tuple[Link, ...] = ()
        if link is not None:
            linked = trace.get_current_span(
                self._propagator.extract({"traceparent": link})).get_span_context()
            if linked.is_valid:
                links = (Link(linked),)
        return self._open(self._root_record(name, kind, attributes, self._root, None, links))

    def span(self, name: str, kind: SpanKind = SpanKind.INTERNAL,
             attributes: Attributes | None = None) -> contextlib.AbstractContextManager[Span]:
        parent = _current.get()
        if parent is None:
            return self._open(self._root_record(name, kind, attributes or {}, self._root, None,
                                                ()))
        # A child shares its parent's trace, sampling decision and trace state.
        return self._open(SpanRecord(name, kind, parent.trace_id, self._ids.generate_span_id(),
                                  parent.flags, parent.state, parent.span_id, False,
                                  dict(attributes) if attributes else {}, (), self._limit))

    def headers(self) -> dict[str, str]:
        current = _current.get()
        if current is None:
            return {}
        carrier = {"traceparent": current.traceparent()}
        if current.state:
            carrier["tracestate"] = current.state.to_header()
        return carrier

    def _root_record(self, name: str, kind: SpanKind, attributes: Attributes, context: Context,
                     remote: SpanContext | None, links: Sequence[Link]) -> SpanRecord:
        """A trace's first span here: the sampler decides (given the remote parent, if any)."""
        if remote is None and self._always:
            return SpanRecord(name, kind, self._ids.generate_trace_id(),
                              self._ids.generate_span_id(), TraceFlags.SAMPLED | self._random,
                              None, 0, False, dict(attributes), links, self._limit)
        trace_id = remote.trace_id if remote is not None else self._ids.generate_trace_id()
        sampling = self._sampler.should_sample(context, trace_id, name, KINDS[kind],
                                               attributes, links)
        flags = TraceFlags.SAMPLED if sampling.decision is Decision.RECORD_AND_SAMPLE else 0
        if remote is not None:
            flags |= remote.trace_flags & TraceFlags.RANDOM_TRACE_ID
        else:
            flags |= self._random
        recorded = dict(attributes)
        if sampling.attributes:
            recorded.update(sampling.attributes)  # what the sampler adds
        return SpanRecord(name, kind, trace_id, self._ids.generate_span_id(), flags,
                       sampling.trace_state, remote.span_id if remote is not None else 0,
                       remote is not None, recorded, links, self._limit)

    def _open(self, record: SpanRecord) -> SpanRecord:
        if record.flags & TraceFlags.SAMPLED:
            record.queue = self._queue
        return record

    def flush(self, timeout: float = 5.0) -> bool:
        """Export what is queued now (tests; blocks the calling thread up to ``timeout``)."""
        return self._provider.force_flush(int(timeout * 1000))

    async def shutdown(self, timeout: float) -> None:
        """Export what is queued and stop, waiting at most ``timeout`` seconds: a collector that
        hangs does not hold up the process's exit (the export thread is a daemon)."""
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        def run() -> None:
            try:
                self._provider.shutdown()
            finally:
                with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                    loop.call_soon_threadsafe(
                        lambda: None if done.done() else done.set_result(None))

        threading.Thread(target=run, name="trace-shutdown", daemon=True).start()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await done


def error_status(record: SpanRecord) -> str | None:
    """None: the span's status is unset; else it is an error, with this description (empty:
    none). An exception escaped it, or (the port's rule) its attributes name an error.type."""
    if record.error is not None:
        return f"{record.error.name}: {record.error.message}"
    return "" if "error.type" in record.attributes else None
