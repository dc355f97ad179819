"""The spans of deliveries, as the OpenTelemetry SDK's in-memory exporter receives them: the
proxy in-process on a real SQLite store, real HTTP on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from sidecar.config.loader import parse_config
from sidecar.obs.metrics import Metrics
from sidecar.obs.otel import OtelTracer
from sidecar.obs.tracing import build_tracer
from sidecar.runtime.serve import Running, start, stop
from tests.support import StubApp, base_config, post, stripe_event, stripe_headers

INBOUND_TRACE = "0af7651916cd43dd8448eb211c80319c"
INBOUND_SPAN = "b7ad6b7169203331"
INBOUND = f"00-{INBOUND_TRACE}-{INBOUND_SPAN}-01"

Proxy = tuple[Running, StubApp, InMemorySpanExporter, OtelTracer]


@pytest.fixture
async def make_proxy(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    made: list[Proxy] = []

    async def make(userinfo: str = "", **overrides: Any) -> Proxy:
        stub = await StubApp().start()
        app_url = stub.url.replace("://", f"://{userinfo}", 1)
        data = base_config(app_url, f"sqlite:///{tmp_path / f'events-{len(made)}.db'}",
                           **overrides)
        config = parse_config(data, env={})
        exporter = InMemorySpanExporter()
        tracer = build_tracer(config.tracing, Metrics(), db_system="sqlite", exporter=exporter)
        assert tracer is not None
        running = await start(config, tracer=tracer)
        made.append((running, stub, exporter, tracer))
        return made[-1]

    yield make
    for running, stub, _, tracer in made:
        await stop(running)
        await stub.stop()
        await tracer.shutdown(5.0)


def spans(exporter: InMemorySpanExporter, tracer: OtelTracer) -> list[ReadableSpan]:
    assert tracer.flush()
    return list(exporter.get_finished_spans())


def trace_of(found: list[ReadableSpan], root: ReadableSpan) -> list[ReadableSpan]:
    assert root.context is not None
    return [s for s in found if s.context is not None
            and s.context.trace_id == root.context.trace_id]


def only(found: list[ReadableSpan], name: str) -> ReadableSpan:
    named = [s for s in found if s.name == name]
    assert len(named) == 1, f"{name}: {[s.name for s in found]}"
    return named[0]


def traceparent_parts(value: str) -> tuple[str, str]:
    _, trace_id, span_id, _ = value.split("-")
    return trace_id, span_id


async def deliver(running: Running, event_id: str, **headers: str) -> int:
    """The proxy's status for a signed delivery of ``event_id``."""
    body = stripe_event(event_id)
    async with aiohttp.ClientSession() as client:
        status, _, _ = await post(client, f"http://{running.listen}/webhooks/stripe", body,
                                  {**stripe_headers(body), **headers})
    return status


async def test_a_new_event_is_a_server_span_with_its_steps_and_the_app_continues_it(
    make_proxy: Callable[..., Any],
) -> None:
    running, stub, exporter, tracer = await make_proxy()
    assert await deliver(running, "evt_new", **{"User-Agent": "Stripe/1.0"}) == 200

    found = spans(exporter, tracer)
    server = only(found, "POST /webhooks/stripe")
    assert server.kind is SpanKind.SERVER and server.parent is None
    attributes = dict(server.attributes or {})
    assert attributes["http.request.method"] == "POST"
    assert attributes["url.path"] == "/webhooks/stripe"
    assert attributes["http.route"] == "/webhooks/stripe"
    assert attributes["http.response.status_code"] == 200
    assert attributes["server.address"] == "127.0.0.1"
    assert attributes["server.port"] == running.listen.port
    assert attributes["client.address"] == "127.0.0.1"
    assert attributes["user_agent.original"] == "Stripe/1.0"
    assert attributes["webhook.provider"] == "stripe"
    assert attributes["webhook.event_id"] == "evt_new"
    assert attributes["webhook.attempt"] == 1
    assert attributes["webhook.result"] == "new"

    steps = trace_of(found, server)
    assert sorted(s.name for s in steps) == sorted(
        ["POST /webhooks/stripe", "verify", "claim", "forward", "record"])
    assert server.context is not None
    for step in steps:
        if step is not server:
            assert step.parent is not None and step.parent.span_id == server.context.span_id
    claim = dict(only(steps, "claim").attributes or {})
    assert claim["db.system"] == "sqlite" and claim["db.operation"] == "claim"
    assert claim["webhook.batched"] is False
    record = dict(only(steps, "record").attributes or {})
    assert record["db.operation"] == "complete"
    forward = only(steps, "forward")
    assert forward.kind is SpanKind.CLIENT
    assert dict(forward.attributes or {})["http.response.status_code"] == 200
    assert dict(forward.attributes or {})["server.port"] == stub.port

    # The app's request carries the forward span's context: its trace continues ours.
    assert forward.context is not None
    app_trace, app_parent = traceparent_parts(stub.seen[0].headers["traceparent"])
    assert app_trace == f"{server.context.trace_id:032x}"
    assert app_parent == f"{forward.context.span_id:016x}"


async def test_the_forward_span_never_shows_the_upstreams_credentials(
    make_proxy: Callable[..., Any],
) -> None:
    running, stub, exporter, tracer = await make_proxy(userinfo="user:s3cretpw@")
    assert await deliver(running, "evt_basic") == 200
    assert stub.seen[0].headers["Authorization"].startswith("Basic ")  # the app got them
    forward = dict(only(spans(exporter, tracer), "forward").attributes or {})
    assert forward["url.full"] == (
        f"http://REDACTED:REDACTED@127.0.0.1:{stub.port}/webhooks/stripe")
    assert "s3cretpw" not in repr(forward)


async def test_a_duplicate_is_answered_without_a_forward_span(
    make_proxy: Callable[..., Any],
) -> None:
    running, stub, exporter, tracer = await make_proxy()
    assert await deliver(running, "evt_dup") == 200
    assert tracer.flush()
    exporter.clear()
    assert await deliver(running, "evt_dup") == 200

    found = spans(exporter, tracer)
    server = only(found, "POST /webhooks/stripe")
    assert dict(server.attributes or {})["webhook.result"] == "duplicate"
    assert "forward" not in [s.name for s in trace_of(found, server)]
    assert stub.count("evt_dup") == 1


async def test_an_app_error_marks_the_forward_and_server_spans(
    make_proxy: Callable[..., Any],
) -> None:
    running, stub, exporter, tracer = await make_proxy()

    async def fail(seen: Any) -> Any:
        from aiohttp import web
        return web.Response(status=503)

    stub.behaviour = fail
    assert (await deliver(running, "evt_fail")) == 503
    found = spans(exporter, tracer)
    server, forward = only(found, "POST /webhooks/stripe"), only(found, "forward")
    assert server.status.status_code is StatusCode.ERROR
    assert forward.status.status_code is StatusCode.ERROR
    assert dict(forward.attributes or {})["error.type"] == "503"
    assert dict(server.attributes or {})["webhook.result"] == "upstream_error"


async def test_an_inbound_traceparent_from_an_untrusted_peer_is_not_a_parent(
    make_proxy: Callable[..., Any],
) -> None:
    running, stub, exporter, tracer = await make_proxy(tracing={"trust_inbound": True})
    assert (await deliver(running, "evt_untrusted", traceparent=INBOUND)) == 200

    server = only(spans(exporter, tracer), "POST /webhooks/stripe")
    assert server.parent is None
    assert server.context is not None and f"{server.context.trace_id:032x}" != INBOUND_TRACE
    # The app gets ours, not the sender's.
    app_trace, _ = traceparent_parts(stub.seen[0].headers["traceparent"])
    assert app_trace == f"{server.context.trace_id:032x}"


async def test_an_inbound_traceparent_from_a_trusted_proxy_is_not_a_parent_by_default(
    make_proxy: Callable[..., Any],
) -> None:
    running, stub, exporter, tracer = await make_proxy(trusted_proxies=["127.0.0.1/32"])
    assert await deliver(running, "evt_trusted", traceparent=INBOUND,
                         tracestate="vendor=opaque") == 200

    server = only(spans(exporter, tracer), "POST /webhooks/stripe")
    assert server.parent is None
    assert server.context is not None and f"{server.context.trace_id:032x}" != INBOUND_TRACE
    assert server.context.trace_state is None or not server.context.trace_state
    app_trace, _ = traceparent_parts(stub.seen[0].headers["traceparent"])
    assert app_trace == f"{server.context.trace_id:032x}"


async def test_an_inbound_traceparent_from_a_trusted_proxy_is_the_parent_when_trusted_inbound(
    make_proxy: Callable[..., Any],
) -> None:
    running, stub, exporter, tracer = await make_proxy(trusted_proxies=["127.0.0.1/32"],
                                                       tracing={"trust_inbound": True})
    assert await deliver(running, "evt_trusted", traceparent=INBOUND,
                         tracestate="vendor=opaque") == 200

    server = only(spans(exporter, tracer), "POST /webhooks/stripe")
    assert server.parent is not None and server.parent.is_remote
    assert f"{server.parent.span_id:016x}" == INBOUND_SPAN
    assert server.context is not None and f"{server.context.trace_id:032x}" == INBOUND_TRACE
    app_trace, _ = traceparent_parts(stub.seen[0].headers["traceparent"])
    assert app_trace == INBOUND_TRACE
    assert stub.seen[0].headers["tracestate"] == "vendor=opaque"


async def test_queue_mode_accept_and_attempt_are_two_traces_linked(
    make_proxy: Callable[..., Any],
) -> None:
    data = base_config("http://unused", "sqlite:///unused")
    providers = data["providers"]
    providers["stripe"] = {**providers["stripe"], "mode": "queue",
                           "queue": {"poll_interval": "100ms"}}
    running, stub, exporter, tracer = await make_proxy(providers=providers)
    assert await deliver(running, "evt_queued") == 200
    await stub.wait_for(lambda: stub.count("evt_queued") == 1 and stub.seen[0].status == 200)

    async def attempt_ended() -> list[ReadableSpan]:
        while True:
            found = spans(exporter, tracer)
            if any(s.name == "queue attempt" for s in found):
                return found
            await asyncio.sleep(0.01)  # polling the exporter, bounded below

    found = await asyncio.wait_for(attempt_ended(), 10)
    accept = only(found, "POST /webhooks/stripe")
    assert dict(accept.attributes or {})["webhook.result"] == "queued"
    assert sorted(s.name for s in trace_of(found, accept)) == sorted(
        ["POST /webhooks/stripe", "verify", "enqueue"])

    attempt = only(found, "queue attempt")
    assert attempt.kind is SpanKind.CONSUMER and attempt.parent is None
    assert accept.context is not None and attempt.context is not None
    assert attempt.context.trace_id != accept.context.trace_id
    [link] = attempt.links
    assert link.context.trace_id == accept.context.trace_id
    assert link.context.span_id == accept.context.span_id
    attributes = dict(attempt.attributes or {})
    assert attributes["webhook.event_id"] == "evt_queued"
    assert attributes["webhook.result"] == "done"
    assert sorted(s.name for s in trace_of(found, attempt)) == sorted(
        ["queue attempt", "forward", "record"])
    app_trace, _ = traceparent_parts(stub.seen[0].headers["traceparent"])
    assert app_trace == f"{attempt.context.trace_id:032x}"


async def test_concurrent_claims_say_they_went_out_in_a_batch(
    make_proxy: Callable[..., Any],
) -> None:
    running, _, exporter, tracer = await make_proxy()
    answers = await asyncio.gather(*(deliver(running, f"evt_many_{i}") for i in range(40)))
    assert set(answers) == {200}

    claims = [dict(s.attributes or {}) for s in spans(exporter, tracer) if s.name == "claim"]
    assert len(claims) == 40
    batched = [c for c in claims if c["webhook.batched"]]
    assert batched, "no claim went out in a batch"
    assert all(int(str(c["db.operation.batch.size"])) >= 2 for c in batched)


async def test_an_unsampled_delivery_exports_nothing_and_tells_the_app_so(
    make_proxy: Callable[..., Any],
) -> None:
    running, stub, exporter, tracer = await make_proxy(tracing={"sampler": "always_off"})
    assert await deliver(running, "evt_unsampled") == 200

    assert spans(exporter, tracer) == []
    # The trace context still goes on, flagged not sampled: the app need not record it either.
    flags = int(stub.seen[0].headers["traceparent"].rsplit("-", 1)[1], 16)
    assert flags & 0x01 == 0
