"""The OTLP/HTTP exporter (``sidecar.obs.otlp.OtlpHttp``) against a real collector on loopback
(an aiohttp app whose answers each test scripts): what counts as taken, what is tried again and
when, and that stopping ends the retries. The exporter runs in a thread, as in the proxy."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web
from opentelemetry.sdk.trace import TracerProvider

from sidecar.config.loader import parse_config
from sidecar.obs import otlp, otlp_encode
from sidecar.obs.metrics import Metrics
from sidecar.obs.otel import SCOPE, OtelTracer, SpanRecord
from sidecar.obs.span_queue import SpanQueue
from sidecar.obs.tracing import build_tracer
from tests.support import base_config, serve_on_loopback

Answer = Callable[[web.Request], Any]


class Collector:
    """POST /v1/traces answered by ``answers`` in turn (the last one again and again); each
    request's arrival time noted. ``release`` ends a handler that waits on it."""

    def __init__(self, *answers: Answer) -> None:
        self.answers = list(answers)
        self.arrivals: list[float] = []
        self.elsewhere = 0
        self.release = asyncio.Event()
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def _traces(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        self.arrivals.append(time.monotonic())
        answer = self.answers[min(len(self.arrivals), len(self.answers)) - 1]
        return await answer(self)  # type: ignore[no-any-return]

    async def _elsewhere(self, request: web.Request) -> web.Response:
        self.elsewhere += 1
        return web.Response()

    async def start(self) -> Collector:
        app = web.Application()
        app.router.add_post("/v1/traces", self._traces)
        app.router.add_route("*", "/elsewhere", self._elsewhere)
        self._runner, self.port = await serve_on_loopback(app, shutdown_timeout=0.5)
        return self

    async def stop(self) -> None:
        self.release.set()
        if self._runner is not None:
            await self._runner.cleanup()

    def exporter(self, timeout: float) -> otlp.OtlpHttp:
        return otlp.OtlpHttp(otlp_encode.Encoder({}, "", SCOPE), f"http://127.0.0.1:{self.port}"
                             "/v1/traces", {}, timeout=timeout)


async def ok(collector: Collector) -> web.Response:
    return web.Response(content_type="application/x-protobuf")


@pytest.fixture
async def collector() -> AsyncIterator[Callable[..., Any]]:
    started: list[Collector] = []

    async def start(*answers: Answer) -> Collector:
        started.append(await Collector(*answers).start())
        return started[-1]

    yield start
    for each in started:
        await each.stop()


def records(count: int = 3) -> list[SpanRecord]:
    provider = TracerProvider(shutdown_on_exit=False)
    queue = SpanQueue(NoExport(), max_queue_size=10, dropped=lambda reason, spans: None)
    tracer = OtelTracer(provider, queue, "sqlite")
    made = []
    for i in range(count):
        with tracer.span(f"step {i}") as span:
            assert isinstance(span, SpanRecord)
            made.append(span)
    queue.shutdown()
    return made


class NoExport:
    def export(self, records: Any) -> bool:
        return True

    def stop(self) -> None:
        pass

    def shutdown(self) -> None:
        pass


async def test_a_redirect_is_not_success_and_is_not_followed(
    collector: Callable[..., Any],
) -> None:
    async def redirect(c: Collector) -> web.Response:
        raise web.HTTPFound("/elsewhere")

    c = await collector(redirect)
    exporter = c.exporter(timeout=5)
    try:
        assert await asyncio.to_thread(exporter.export, records()) is False
    finally:
        exporter.shutdown()
    assert c.elsewhere == 0 and len(c.arrivals) == 1


async def test_retry_after_on_503_is_honoured(collector: Callable[..., Any]) -> None:
    async def busy(c: Collector) -> web.Response:
        return web.Response(status=503, headers={"Retry-After": "2"})

    c = await collector(busy, ok)
    exporter = c.exporter(timeout=10)
    try:
        assert await asyncio.to_thread(exporter.export, records()) is True
    finally:
        exporter.shutdown()
    first, second = c.arrivals
    assert second - first >= 1.9  # the backoff alone would have tried again after ~1 s


async def test_a_retry_after_past_the_timeout_ends_the_export_at_once(
    collector: Callable[..., Any],
) -> None:
    async def later(c: Collector) -> web.Response:
        return web.Response(status=429, headers={"Retry-After": "3600"})

    c = await collector(later)
    exporter = c.exporter(timeout=10)
    started = time.monotonic()
    try:
        assert await asyncio.to_thread(exporter.export, records()) is False
    finally:
        exporter.shutdown()
    assert time.monotonic() - started < 5 and len(c.arrivals) == 1


async def test_an_answer_that_times_out_is_tried_again(collector: Callable[..., Any]) -> None:
    async def hang(c: Collector) -> web.Response:
        await c.release.wait()
        return web.Response()

    c = await collector(hang, ok)
    exporter = c.exporter(timeout=4)
    try:
        assert await asyncio.to_thread(exporter.export, records()) is True
    finally:
        exporter.shutdown()
    assert len(c.arrivals) == 2


async def test_shutdown_ends_the_retries_of_a_down_collector_at_once() -> None:
    with socket.socket() as closed:  # a port nothing listens on: connections refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    exporter = otlp.OtlpHttp(otlp_encode.Encoder({}, "", SCOPE), f"http://127.0.0.1:{port}/v1/traces",
                             {}, timeout=60)
    dropped: list[tuple[str, int]] = []
    queue = SpanQueue(exporter, max_queue_size=100,
                      dropped=lambda reason, spans: dropped.append((reason, spans)),
                      schedule_delay_millis=600_000)
    for record in records(2):
        queue.put(record)
    stopping = threading.Thread(target=queue.shutdown, daemon=True)
    started = time.monotonic()
    stopping.start()
    await asyncio.to_thread(stopping.join, 10)
    assert not stopping.is_alive(), "the final export went on retrying"
    assert time.monotonic() - started < 5
    assert dropped == [("export_failed", 2)]


def test_the_timeout_variable_is_in_milliseconds() -> None:
    exporter = otlp.from_environment(otlp_encode.Encoder({}, "", SCOPE), None, {},
                                     {"OTEL_EXPORTER_OTLP_TIMEOUT": "10000"})
    assert exporter.timeout == 10.0
    exporter.shutdown()


@pytest.mark.parametrize(("block", "kept"), [({}, 3), ({"max_queue_size": 5}, 5)])
async def test_the_queue_size_variable_is_honoured_unless_the_key_is_set(
    block: dict[str, Any], kept: int, collector: Callable[..., Any],
) -> None:
    arrived = asyncio.Event()

    async def held(c: Collector) -> web.Response:
        arrived.set()
        await c.release.wait()
        return web.Response(content_type="application/x-protobuf")

    c = await collector(held)
    metrics = Metrics()
    config = parse_config(base_config("http://127.0.0.1:9", "sqlite:///x.db", tracing=block),
                          env={})
    environ = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{c.port}",
               "OTEL_BSP_MAX_QUEUE_SIZE": "3"}
    tracer = build_tracer(config.tracing, metrics, db_system="sqlite", environ=environ)
    assert tracer is not None

    def spans(count: int) -> None:
        for i in range(count):
            with tracer.span(f"step {i}"):
                pass

    try:
        # A full queue is one batch: the export thread takes all of it, and its export is
        # held by the collector, so the next spans fill the queue again and the rest drop.
        spans(kept)
        await asyncio.wait_for(arrived.wait(), 10)
        spans(10)
        assert metrics.registry.get_sample_value(
            "webhook_trace_spans_dropped_total", {"reason": "queue_full"}) == 10 - kept
    finally:
        c.release.set()
        await tracer.shutdown(5)
