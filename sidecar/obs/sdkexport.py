"""Span records (``sidecar.obs.otel.SpanRecord``) to any SDK ``SpanExporter``, as the SDK's own
``ReadableSpan`` objects: the in-memory exporter in tests, or an exporter passed to
``sidecar.obs.tracing.build_tracer``. The proxy's own path is ``sidecar.obs.otlp``."""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, Status, StatusCode, TraceFlags

from sidecar.obs.otel import KINDS, SCOPE, SpanRecord, error_status


class SdkExport:
    """Records to an SDK ``SpanExporter`` (any: the in-memory one in tests), as the SDK's
    ``ReadableSpan`` objects."""

    def __init__(self, exporter: SpanExporter, provider: TracerProvider) -> None:
        self._exporter = exporter
        self._resource = provider.resource
        self._scope = InstrumentationScope(SCOPE)

    def export(self, records: Sequence[SpanRecord]) -> bool:
        spans = [self._readable(record) for record in records]
        return self._exporter.export(spans) is SpanExportResult.SUCCESS

    def stop(self) -> None:
        pass

    def shutdown(self) -> None:
        self._exporter.shutdown()

    def _readable(self, record: SpanRecord) -> ReadableSpan:
        """The SDK's span for a record (in the export thread: off the delivery path)."""
        context = SpanContext(record.trace_id, record.span_id, False, TraceFlags(record.flags),
                              record.state)
        parent = None
        if record.parent:
            parent = SpanContext(record.trace_id, record.parent, record.remote,
                                 TraceFlags(record.flags), record.state)
        description = error_status(record)
        status = (Status(StatusCode.UNSET) if description is None
                  else Status(StatusCode.ERROR, description or None))
        events: tuple[Event, ...] = ()
        if record.error is not None:
            error = record.error
            events = (Event("exception", {"exception.type": error.qualname,
                                          "exception.message": error.message,
                                          "exception.stacktrace": error.stack,
                                          "exception.escaped": "False"}, record.end),)
        return ReadableSpan(record.name, context, parent, self._resource, record.attributes,
                            events, record.links, KINDS[record.kind], status=status,
                            start_time=record.start, end_time=record.end,
                            instrumentation_scope=self._scope)
