"""Tracing from a real proxy process: spans exported over OTLP/HTTP to a real receiver on
loopback (decoded with opentelemetry-proto), a collector that hangs or is down never delays a
delivery, and a proxy asked to trace without the otel extra refuses to start, clearly."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.support import (
    REPO,
    ProxyProcess,
    StubApp,
    base_config,
    post,
    serve_on_loopback,
    stripe_event,
    stripe_headers,
    until,
    write_config,
)


class Receiver:
    """An OTLP/HTTP trace receiver: POST /v1/traces, protobuf. ``hang``: it reads each export
    and never answers (a collector that is stuck)."""

    def __init__(self, *, hang: bool = False) -> None:
        self.hang = hang
        self.spans: list[tuple[dict[str, Any], Any]] = []  # (resource attributes, span)
        self.exports = 0
        self._release = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def _traces(self, request: web.Request) -> web.Response:
        message = ExportTraceServiceRequest.FromString(await request.read())
        self.exports += 1
        if self.hang:
            await self._release.wait()
        for resource_spans in message.resource_spans:
            resource = {a.key: a.value.string_value
                        for a in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                self.spans.extend((resource, span) for span in scope.spans)
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")

    async def start(self) -> Receiver:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/traces", self._traces)
        self._runner, self.port = await serve_on_loopback(app, shutdown_timeout=0.5)
        return self

    async def stop(self) -> None:
        self._release.set()
        if self._runner is not None:
            await self._runner.cleanup()


@contextlib.asynccontextmanager
async def proxy(tmp_path: Path, env: dict[str, str], **overrides: Any
                ) -> AsyncIterator[tuple[ProxyProcess, StubApp]]:
    stub = await StubApp().start()
    config = base_config(stub.url, f"sqlite:///{tmp_path / 'events.db'}", **overrides)
    process = ProxyProcess(write_config(tmp_path, config), env=env)
    await process.start()
    try:
        yield process, stub
    finally:
        await process.terminate()
        await stub.stop()


async def deliver(client: aiohttp.ClientSession, process: ProxyProcess, event_id: str) -> int:
    body = stripe_event(event_id)
    status, _, _ = await post(client, f"{process.url}/webhooks/stripe", body,
                              stripe_headers(body))
    return status


async def test_spans_reach_an_otlp_receiver_and_the_app_continues_the_trace(
    tmp_path: Path,
) -> None:
    receiver = await Receiver().start()
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.port}",
           "OTEL_BSP_SCHEDULE_DELAY": "50"}
    try:
        async with proxy(tmp_path, env) as (process, stub), aiohttp.ClientSession() as client:
            assert await deliver(client, process, "evt_otlp") == 200
            _, app_trace, app_parent, _ = stub.seen[0].headers["traceparent"].split("-")

            def exported(name: str) -> list[tuple[dict[str, Any], Any]]:
                return [(r, s) for r, s in receiver.spans if s.name == name]

            await until(lambda: exported("POST /webhooks/stripe") and exported("record"), 10)
            [(resource, server)] = exported("POST /webhooks/stripe")
            assert resource["service.name"] == "webhook-sidecar"
            assert server.trace_id.hex() == app_trace
            [(_, forward)] = exported("forward")
            assert forward.span_id.hex() == app_parent
            assert forward.parent_span_id == server.span_id
            attributes = {a.key: a.value for a in server.attributes}
            assert attributes["webhook.event_id"].string_value == "evt_otlp"
            assert attributes["http.response.status_code"].int_value == 200
    finally:
        await receiver.stop()


async def dropped(client: aiohttp.ClientSession, process: ProxyProcess) -> float:
    async with client.get(f"{process.admin_url}/metrics") as response:
        text = await response.text()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("webhook_trace_spans_dropped_total{"))


@pytest.mark.parametrize("collector", ["hangs", "down"])
async def test_a_collector_that_hangs_or_is_down_never_delays_a_delivery(
    tmp_path: Path, collector: str,
) -> None:
    receiver = await Receiver(hang=True).start()
    port = receiver.port
    if collector == "down":
        await receiver.stop()  # nothing listens there any more: connections are refused
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
           "OTEL_BSP_SCHEDULE_DELAY": "10", "OTEL_EXPORTER_OTLP_TIMEOUT": "30000"}
    try:
        async with proxy(tmp_path, env, tracing={"max_queue_size": 8}) as (process, stub), \
                aiohttp.ClientSession() as client:
            slowest = 0.0
            for i in range(30):
                started = time.monotonic()
                assert await deliver(client, process, f"evt_{collector}_{i}") == 200
                slowest = max(slowest, time.monotonic() - started)
            assert stub.count() == 30
            # A delivery takes milliseconds here; an export waited for would take up to 30 s.
            assert slowest < 1.0, f"a delivery took {slowest:.2f} s"
            if collector == "hangs":
                # Five spans per delivery, a queue of 8, one export stuck: the rest dropped.
                await until(lambda: receiver.exports >= 1, 10)
                assert await dropped(client, process) > 0
            # The exit is not held up by the exports still pending.
            started = time.monotonic()
        assert time.monotonic() - started < 5.0
    finally:
        await receiver.stop()


BLOCK_OTEL = '''
import importlib.abc, sys

class _NoOpenTelemetry(importlib.abc.MetaPathFinder):
    """As if the otel extra were not installed."""

    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _NoOpenTelemetry())
'''


async def test_without_the_otel_extra_the_proxy_runs_untraced_and_refuses_to_trace(
    tmp_path: Path,
) -> None:
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(BLOCK_OTEL)
    blocked = {"PYTHONPATH": f"{hooks}:{REPO}"}

    # Tracing not configured: the proxy serves, and OpenTelemetry is never imported.
    async with proxy(tmp_path, blocked) as (process, _), aiohttp.ClientSession() as client:
        assert await deliver(client, process, "evt_untraced") == 200

    config = write_config(tmp_path, base_config("http://127.0.0.1:9", "sqlite:///x.db"),
                          "traced.yaml")
    run = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "sidecar", "run", "--config", str(config),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=str(tmp_path),
        env={**blocked, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
             "PATH": "/usr/bin:/bin"})
    _, stderr = await asyncio.wait_for(run.communicate(), 30)
    assert run.returncode == 2, stderr.decode()
    message = stderr.decode()
    assert "config error" in message and "OTEL_EXPORTER_OTLP_ENDPOINT is set" in message
    assert "pip install 'webhook-sidecar[otel]'" in message
