"""The tracing port (``core.tracing.Tracer``) on the OpenTelemetry SDK. Imported only when tracing
is on (``sidecar.obs.tracing.build_tracer``): the ``otel`` extra is optional.

An exporter that is down or slow never delays a delivery: a finished span is put on the
``BatchSpanProcessor``'s bounded queue and the delivery goes on; a background thread exports.
Spans that cannot be kept are dropped and counted (``SpanDrops``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Final

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.trace import Link, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from sidecar.core.tracing import Attributes, Span, SpanKind

_KINDS: Final = {
    SpanKind.SERVER: trace.SpanKind.SERVER,
    SpanKind.CLIENT: trace.SpanKind.CLIENT,
    SpanKind.CONSUMER: trace.SpanKind.CONSUMER,
    SpanKind.INTERNAL: trace.SpanKind.INTERNAL,
}

# The SDK logs a warning per span it drops from a full queue: while a collector is down that is
# a line per delivery. Drops are counted in a metric instead.
logging.getLogger("opentelemetry.sdk._shared_internal").setLevel(logging.ERROR)

Dropped = Callable[[str, int], None]  # (reason, spans)


class OtelTracer:
    """``core.tracing.Tracer`` on an SDK ``TracerProvider``. W3C Trace Context in and out."""

    enabled = True

    def __init__(self, provider: TracerProvider, db_system: str) -> None:
        self._provider = provider
        self._tracer = provider.get_tracer("webhook-sidecar")
        self._propagator = TraceContextTextMapPropagator()
        self._db_system = db_system
        self._root = Context()  # no parent: a new trace, whatever the running task holds

    @property
    def db_system(self) -> str:
        return self._db_system

    def server(self, name: str, attributes: Attributes,
               parent: Mapping[str, str] | None) -> contextlib.AbstractContextManager[Span]:
        context = self._propagator.extract(parent) if parent is not None else self._root
        return self._open(name, SpanKind.SERVER, attributes, context, ())

    def linked(self, name: str, kind: SpanKind, attributes: Attributes,
               link: str | None) -> contextlib.AbstractContextManager[Span]:
        links: tuple[Link, ...] = ()
        if link is not None:
            linked = trace.get_current_span(
                self._propagator.extract({"traceparent": link})).get_span_context()
            if linked.is_valid:
                links = (Link(linked),)
        return self._open(name, kind, attributes, self._root, links)

    def span(self, name: str, kind: SpanKind = SpanKind.INTERNAL,
             attributes: Attributes | None = None) -> contextlib.AbstractContextManager[Span]:
        return self._open(name, kind, attributes or {}, None, ())

    def headers(self) -> dict[str, str]:
        carrier: dict[str, str] = {}
        self._propagator.inject(carrier)
        return carrier

    @contextlib.contextmanager
    def _open(self, name: str, kind: SpanKind, attributes: Attributes,
              context: Context | None, links: Sequence[Link]) -> Iterator[Span]:
        with self._tracer.start_as_current_span(name, context=context, kind=_KINDS[kind],
                                                attributes=attributes, links=links) as span:
            yield span
            # The port's rule: a span that names an error.type ends with an error status.
            recorded = getattr(span, "attributes", None)
            if recorded is not None and "error.type" in recorded:
                span.set_status(Status(StatusCode.ERROR))

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


class CountingExporter(SpanExporter):
    """Wraps the exporter: spans of an export that failed (after the exporter's own retries,
    within its timeout) or raised are counted as dropped, ``export_failed``."""

    def __init__(self, inner: SpanExporter, dropped: Dropped) -> None:
        self._inner = inner
        self._dropped = dropped

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self._inner.export(spans)
        except Exception:
            self._dropped("export_failed", len(spans))
            raise
        if result is not SpanExportResult.SUCCESS:
            self._dropped("export_failed", len(spans))
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


class CountingProcessor(BatchSpanProcessor):
    """A ``BatchSpanProcessor`` (queue bounded by ``max_queue_size``) that counts the spans it
    drops because its queue is full (``queue_full``): the SDK drops the oldest queued span to
    make room, and says so only in a log line and its own meter. The count reads the SDK's
    queue length before each span is queued; that queue is not public API, so if an SDK
    version no longer has it, ``counts_drops`` is False and queue-full drops go uncounted."""

    def __init__(self, exporter: SpanExporter, *, max_queue_size: int, dropped: Dropped,
                 schedule_delay_millis: float | None = None) -> None:
        # The schedule delay: OTEL_BSP_SCHEDULE_DELAY, or the SDK's default, unless given.
        super().__init__(exporter, max_queue_size=max_queue_size,
                         max_export_batch_size=min(512, max_queue_size),
                         schedule_delay_millis=schedule_delay_millis)
        self._max_queue_size = max_queue_size
        self._dropped = dropped
        queue = getattr(getattr(self, "_batch_processor", None), "_queue", None)
        self._queue: Sequence[object] | None = queue if hasattr(queue, "__len__") else None

    @property
    def counts_drops(self) -> bool:
        return self._queue is not None

    def on_end(self, span: ReadableSpan) -> None:
        context = span.context
        if (self._queue is not None and context is not None and context.trace_flags.sampled
                and len(self._queue) >= self._max_queue_size):
            self._dropped("queue_full", 1)
        super().on_end(span)
