"""The OTLP request the proxy writes from its span records (``sidecar.obs.otlp``) decodes to the
message the SDK's own encoder builds for the same spans: the fast path says what the SDK would."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator, Sequence

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sidecar.core.tracing import SpanKind
from sidecar.obs import otel, otlp, otlp_encode
from sidecar.obs.otel import SCOPE, OtelTracer, SpanRecord
from sidecar.obs.sdkexport import SdkExport
from sidecar.obs.span_queue import SpanQueue

INBOUND = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


class BothEncodings:
    """Exports each batch both ways: the proxy's bytes, and the SDK's spans (in memory)."""

    def __init__(self, provider: TracerProvider) -> None:
        resource = provider.resource
        self.encoder = otlp_encode.Encoder(resource.attributes, resource.schema_url, SCOPE)
        self.memory = InMemorySpanExporter()
        self.sdk = SdkExport(self.memory, provider)
        self.encoded: list[bytes] = []

    def export(self, records: Sequence[SpanRecord]) -> bool:
        self.encoded.append(self.encoder.encode(records))
        return self.sdk.export(records)

    def stop(self) -> None:
        self.sdk.stop()

    def shutdown(self) -> None:
        self.sdk.shutdown()


@pytest.fixture
def traced() -> Iterator[tuple[OtelTracer, BothEncodings]]:
    provider = TracerProvider(resource=Resource.create(
        {"service.name": "webhook-sidecar", "deployment.environment.name": "test",
         "host.cores": 2}, schema_url="https://opentelemetry.io/schemas/1.26.0"),
        shutdown_on_exit=False)
    both = BothEncodings(provider)
    queue = SpanQueue(both, max_queue_size=1000, dropped=lambda reason, spans: None)
    provider.add_span_processor(queue)
    yield OtelTracer(provider, queue, "sqlite"), both
    provider.shutdown()


def decoded(both: BothEncodings) -> tuple[ExportTraceServiceRequest, ExportTraceServiceRequest]:
    ours = ExportTraceServiceRequest()
    for encoded in both.encoded:
        ours.MergeFromString(encoded)
    return ours, encode_spans(both.memory.get_finished_spans())


def test_a_delivery_encodes_as_the_sdk_encodes_it(
    traced: tuple[OtelTracer, BothEncodings],
) -> None:
    tracer, both = traced
    for event in ("evt_1", "evt_2"):  # the second: its recurring attributes come remembered
        with tracer.server("POST /webhooks/stripe", {
                "http.request.method": "POST", "server.port": 8080, "webhook.provider": "stripe",
                "http.request.body.size": 0, "url.path": "/webhooks/ströpe"}, None) as server:
            with tracer.span("verify"):
                pass
            with tracer.span("claim", attributes={"db.system": "sqlite"}) as claim:
                claim.set_attribute("webhook.batched", True)
                claim.set_attribute("db.operation.batch.size", 3)
            with tracer.span("forward", SpanKind.CLIENT, {"webhook.attempt": 1}) as forward:
                forward.set_attribute("error.type", "503")
                forward.set_attribute("webhook.ratio", 0.25)
                forward.set_attribute("webhook.offset", -7)
            server.set_attribute("webhook.event_id", event)
    assert tracer.flush()
    ours, sdk = decoded(both)
    assert len(sdk.resource_spans[0].scope_spans[0].spans) == 8
    assert ours == sdk


def test_links_remote_parents_trace_state_and_exceptions_encode_as_the_sdk_encodes_them(
    traced: tuple[OtelTracer, BothEncodings],
) -> None:
    tracer, both = traced
    with tracer.server("POST /hooks", {}, {"traceparent": INBOUND, "tracestate": "v=1,w=2"}):
        with tracer.span("verify"):
            pass
    with tracer.linked("queue attempt", SpanKind.CONSUMER, {"webhook.attempt": 2}, INBOUND):
        with pytest.raises(ValueError), tracer.span("record"):
            raise ValueError("the store said no")
    assert tracer.flush()
    ours, sdk = decoded(both)
    spans = sdk.resource_spans[0].scope_spans[0].spans
    assert [s.name for s in spans] == ["verify", "POST /hooks", "record", "queue attempt"]
    assert spans[1].trace_state == "v=1,w=2" and spans[1].parent_span_id.hex() == INBOUND[36:52]
    assert spans[2].events[0].name == "exception" and spans[2].status.code == 2
    assert len(spans[3].links) == 1
    assert ours == sdk


@pytest.mark.parametrize(("endpoint", "environ", "url"), [
    ("http://collector:4318", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://other:1"},
     "http://collector:4318/v1/traces"),
    (None, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://c/custom",
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://other:1"}, "https://c/custom"),
    (None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"}, "http://c:4318/v1/traces"),
    (None, {}, "http://localhost:4318/v1/traces"),
])
def test_the_endpoint_is_the_blocks_else_the_environments_as_the_sdk_reads_it(
    endpoint: str | None, environ: dict[str, str], url: str,
) -> None:
    exporter = otlp.from_environment(otlp_encode.Encoder({}, "", SCOPE), endpoint, {}, environ)
    assert exporter.endpoint == url
    exporter.shutdown()


def test_headers_and_timeout_in_milliseconds_come_from_the_environment_the_block_winning() -> None:
    environ = {"OTEL_EXPORTER_OTLP_HEADERS": "api-key=env,x-team=a%20b",
               "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "2500", "OTEL_EXPORTER_OTLP_TIMEOUT": "9"}
    exporter = otlp.from_environment(otlp_encode.Encoder({}, "", SCOPE), None, {"api-key": "block"},
                                     environ)
    assert exporter.headers == {"api-key": "block", "x-team": "a b"}
    assert exporter.timeout == 2.5
    exporter.shutdown()


class Held:
    """What a failing step's frame holds (a request body, say): weakly referable."""

    def __init__(self) -> None:
        self.body = bytes(1024 * 1024)


class StoreSaidNo(Exception):
    pass


def test_an_ended_span_keeps_no_exception_alive_before_export() -> None:
    provider = TracerProvider(shutdown_on_exit=False)
    both = BothEncodings(provider)
    queue = SpanQueue(both, max_queue_size=1000, dropped=lambda reason, spans: None,
                      schedule_delay_millis=600_000)  # exported only when flushed
    provider.add_span_processor(queue)
    tracer = OtelTracer(provider, queue, "sqlite")

    def step(held: Held) -> None:
        raise StoreSaidNo(f"no room for {len(held.body)} bytes")

    held = Held()
    body = weakref.ref(held)
    try:
        with tracer.span("record"):
            step(held)
    except StoreSaidNo as exc:
        error = weakref.ref(exc)
    del held
    gc.collect()
    try:
        assert error() is None and body() is None  # the span has ended, not been exported
        assert tracer.flush()
        [span] = both.memory.get_finished_spans()
        [event] = span.events
        attributes = dict(event.attributes or {})
        assert attributes["exception.type"] == "StoreSaidNo"
        assert attributes["exception.message"] == "no room for 1048576 bytes"
        assert "in step" in str(attributes["exception.stacktrace"])
        assert span.status.description == "StoreSaidNo: no room for 1048576 bytes"
    finally:
        provider.shutdown()


def test_attribute_values_are_valid_utf8_and_cut_where_they_enter_a_span(
    traced: tuple[OtelTracer, BothEncodings],
) -> None:
    tracer, both = traced
    received = b"agent \xff".decode("utf-8", "surrogateescape")  # as aiohttp decodes headers
    with tracer.span("verify", attributes={"user_agent.original": received}) as span:
        span.set_attribute("a", "lone \ud800 surrogate")
        span.set_attribute("long", "x" * 10_000)
        span.set_attribute("ascii", "as it is")
    assert tracer.flush()
    ours, sdk = decoded(both)
    assert ours == sdk
    attributes = {a.key: a.value.string_value
                  for a in ours.resource_spans[0].scope_spans[0].spans[0].attributes}
    assert attributes["user_agent.original"] == "agent \ufffd"
    assert "\ufffd" in attributes["a"] and attributes["a"].startswith("lone ")
    assert attributes["long"] == "x" * otel.DEFAULT_VALUE_LENGTH_LIMIT
    assert attributes["ascii"] == "as it is"


def test_a_span_that_cannot_be_encoded_is_dropped_alone_and_counted(
    traced: tuple[OtelTracer, BothEncodings],
) -> None:
    tracer, _ = traced
    counted: list[int] = []
    encoder = otlp_encode.Encoder({}, "", SCOPE, unencodable=counted.append)
    records = []
    for name in ("before", "odd", "after"):
        with tracer.span(name) as span:
            assert isinstance(span, SpanRecord)
            records.append(span)
    records[1].attributes["odd"] = object()  # type: ignore[assignment]  # as a bug could
    message = ExportTraceServiceRequest.FromString(encoder.encode(records))
    assert [s.name for s in message.resource_spans[0].scope_spans[0].spans] == [
        "before", "after"]
    assert counted == [1]
