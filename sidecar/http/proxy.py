"""The provider-facing HTTP shell: read the body within its bounds, hand the request to the
delivery pipeline, write its answer, and emit one log line and one count per delivery, even
when something unexpected happens, and its duration end to end once the answer is written.
(The connection-level bounds — header and idle timeouts, connection cap, malformed requests,
no decompression — are the listener's: ``sidecar.http.listener``.)"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace

from aiohttp import HttpVersion11, web
from multidict import CIMultiDict
from yarl import URL

from sidecar.config.model import LogLevel, ProviderConfig
from sidecar.core import phases
from sidecar.core.answers import Answer, Result, refuse
from sidecar.core.body import read_bounded
from sidecar.core.forwarded import is_trusted, peer_address
from sidecar.core.tracing import Span
from sidecar.delivery import Inbound
from sidecar.http.appkeys import CONFIG, METRICS, PIPELINE, SIGNATURE_WATCH, TRACER
from sidecar.http.listener import BoundedConnection, PreparedResponse, ProviderResponse, prepared
from sidecar.obs.logs import delivery_line, get_logger

log = get_logger("sidecar.delivery")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def delivery_handler(provider: ProviderConfig) -> Handler:
    async def handle(request: web.Request) -> web.StreamResponse:
        tracer = request.app[TRACER]
        if not tracer.enabled:
            return await _handle(provider, request, None)
        # The request's attributes are set inside _handle's protection: whatever a sender puts
        # in its headers, the delivery gets its answer, its log line and its count.
        with tracer.server(f"{request.method} {provider.path}", {},
                           _trusted_parent(request)) as span:
            return await _handle(provider, request, span)

    return handle


async def _handle(provider: ProviderConfig, request: web.Request,
                  span: Span | None) -> web.StreamResponse:
    started = time.monotonic()
    marks = _phase_marks(request)
    answer: Answer | None = None
    try:
        if span is not None:
            _describe_request(span, provider, request)
        answer = await _answer(provider, request)
        phases.mark("answer")
    except Exception as exc:  # a bug in this shell (the pipeline answers its own)
        answer = replace(refuse("internal_error"), log={"exc_info": exc})
    finally:
        result = _observe(request, provider, answer, time.monotonic() - started)
        if span is not None:
            _describe(span, answer)
    response = _response(request, answer)
    # From the request's first byte to the answer's last (timed by the listener).
    observe = request.app[METRICS].delivery_duration.labels(provider.key, result.value).observe
    response.when_written(observe if marks is None else _with_phases(observe, marks, provider))
    if _closes(answer):
        response.force_close()  # a refused body is not read: the connection ends with it
    return response


def _response(request: web.Request, answer: Answer) -> ProviderResponse | PreparedResponse:
    """The answer to write: an answer given again and again (a known duplicate's) as the bytes
    made at its first delivery, when the connection stays open (HTTP/1.1, no ``Connection:
    close``) — aiohttp decides the rest; else built by aiohttp."""
    encoded = answer.encoded
    if encoded is not None and request.version == HttpVersion11 and request.keep_alive:
        response = prepared(answer.status, answer.headers, answer.body, encoded)
        if response is not None:
            return response
    return ProviderResponse(status=answer.status, body=answer.body,
                            headers=CIMultiDict(answer.headers))


def _phase_marks(request: web.Request) -> phases.Marks | None:
    """The delivery's phase marks, from its first byte (``core.phases``), at ``log.level:
    debug`` only."""
    if request.app[CONFIG].log_level is not LogLevel.DEBUG:
        return None
    connection = request.protocol
    first_byte = (connection.first_byte if isinstance(connection, BoundedConnection)
                  else time.monotonic())
    marks = phases.start(round(first_byte * 1e9))
    marks.add("headers")
    return marks


def _with_phases(observe: Callable[[float], None], marks: phases.Marks,
                 provider: ProviderConfig) -> Callable[[float], None]:
    """``observe``, then the ``delivery_phases`` line once the answer is written."""

    def report(seconds: float) -> None:
        observe(seconds)
        marks.add("written")
        log.debug("delivery_phases", provider=provider.key, phases_ms=marks.phases_ms())

    return report


def _trusted_parent(request: web.Request) -> Mapping[str, str] | None:
    """The request's headers, to continue the trace context they carry, only when
    ``tracing.trust_inbound`` says so and from a trusted proxy: providers send none, and anyone
    else could send any (it would graft our spans onto a trace of their choosing, or choose
    whether they are sampled); an ingress passes a sender's on unless told otherwise."""
    config = request.app[CONFIG]
    trusted = config.trusted_proxies
    if not trusted or not config.tracing.trust_inbound:  # the usual case: nothing to parse
        return None
    address = peer_address(request.remote)
    if address is not None and is_trusted(address, trusted):
        return request.headers
    return None


def _describe_request(span: Span, provider: ProviderConfig, request: web.Request) -> None:
    """The server span's attributes known before the answer (HTTP semantic conventions; the
    query is left out: it may carry a token). The span makes each value valid UTF-8."""
    set_attribute = span.set_attribute
    set_attribute("http.request.method", request.method)
    set_attribute("url.path", request.path)
    set_attribute("url.scheme", request.scheme)
    set_attribute("http.route", provider.path)
    set_attribute("webhook.provider", provider.key)
    host, port = _server(request.scheme, request.host)
    if host is not None:
        set_attribute("server.address", host)
    if port is not None:
        set_attribute("server.port", port)
    if request.remote:
        set_attribute("client.address", request.remote)
        set_attribute("network.peer.address", request.remote)
    if request.content_length is not None:
        set_attribute("http.request.body.size", request.content_length)
    agent = request.headers.get("User-Agent")
    if agent:
        set_attribute("user_agent.original", agent)


@functools.lru_cache(maxsize=64)
def _server(scheme: str, host: str) -> tuple[str | None, int | None]:
    """The Host header's host and port (else the scheme's), as ``request.url`` reads them;
    (None, None) for a Host that is no authority (a port out of range or not a number).
    Remembered, as requests name the same few, and building that URL costs more than a span;
    a bad one too (``lru_cache`` would not remember an exception)."""
    try:
        url = URL.build(scheme=scheme, authority=host)
        return url.host or "", url.port  # .host decodes IDNA: `xn--` alone raises here
    except ValueError:  # UnicodeError (IDNA) included
        return None, None


def _describe(span: Span, answer: Answer | None) -> None:
    """What the delivery's answer tells its span; a 5xx is an error of a server span."""
    if answer is None:  # cancelled by a shutdown past its timeout
        span.set_attribute("error.type", "cancelled")
        span.set_attribute("webhook.result", Result.ERROR.value)
        return
    span.set_attribute("http.response.status_code", answer.status)
    span.set_attribute("webhook.result", answer.result.value)
    for key in ("event_id", "attempt"):
        value = answer.log.get(key)
        if isinstance(value, str | int):
            span.set_attribute(f"webhook.{key}", value)
    if answer.status >= 500:
        span.set_attribute("error.type", str(answer.status))


def _closes(answer: Answer) -> bool:
    return any(name.lower() == "connection" and value.lower() == "close"
               for name, value in answer.headers)


async def _answer(provider: ProviderConfig, request: web.Request) -> Answer:
    body = await _read(provider, request)
    phases.mark("read")
    if isinstance(body, Answer):
        return replace(body, log={"reason": body.reason})
    inbound = Inbound(method=request.method, path=request.path_qs,
                      query=request.rel_url.raw_query_string, headers=request.headers,
                      body=body, peer=request.remote, scheme=request.scheme)
    return await request.app[PIPELINE].deliver(provider, inbound)


async def _read(provider: ProviderConfig, request: web.Request) -> bytes | Answer:
    """The body, read within the provider's bounds, or the answer refusing it."""
    codings = [coding.strip().lower()
               for value in request.headers.getall("Transfer-Encoding", [])
               for coding in value.split(",")]
    if codings and codings != ["chunked"]:
        # aiohttp's parser de-chunks and would pass any other coding's bytes on as the body.
        return refuse("transfer_encoding", coding=", ".join(codings))
    limit = provider.max_body_bytes
    if request.content_length is not None and request.content_length > limit:
        return refuse("too_large", limit=limit)
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding != "identity":
        # Signatures cover the bytes as sent and the app expects them so: no decoding here.
        return refuse("content_encoding", encoding=encoding)
    content = request.content
    try:
        if content.is_eof():  # the whole body came with the headers: no wait, so no timer
            body = await read_bounded(content, limit + 1)
        else:
            async with asyncio.timeout(request.app[CONFIG].body_read_timeout):
                body = await read_bounded(content, limit + 1)
    except TimeoutError:
        return refuse("body_timeout")
    except (ConnectionError, web.RequestPayloadError):
        return refuse("malformed_request", "body_incomplete")  # the sender went away mid-body
    if len(body) > limit:
        return refuse("too_large", limit=limit)
    return body


def _observe(request: web.Request, provider: ProviderConfig, answer: Answer | None,
             seconds: float) -> Result:
    """The delivery's one log line and count; its result. ``answer`` is None only when the
    handler was cancelled (shutdown past its timeout): counted as an error, logged without a
    status (and, as nothing is written, not timed)."""
    result = answer.result if answer is not None else Result.ERROR
    request.app[METRICS].events.labels(provider.key, result.value).inc()
    if result is Result.INVALID_SIGNATURE and SIGNATURE_WATCH in request.app:
        request.app[SIGNATURE_WATCH].failed(provider.key)  # notify.signature_failures
    latency_ms = round(seconds * 1000, 2)
    if answer is None:
        # Cut off by a shutdown past its timeout: not a bug.
        log.warning("delivery", provider=provider.key, result=result.value, status=None,
                    latency_ms=latency_ms, cancelled=True)
        return result
    if result is Result.ERROR:
        emit = log.error  # a bug, logged with its traceback
    elif result in (Result.STORE_ERROR, Result.QUEUE_FULL):
        emit = log.warning  # the database is down or slow, or the queue full: retry later
    elif delivery_line(provider.key, result.value, answer.status, latency_ms, answer.log):
        return result  # the common case, written without structlog's chain (same bytes)
    else:
        emit = log.info
    emit("delivery", provider=provider.key, result=result.value, status=answer.status,
         latency_ms=latency_ms, **answer.log)
    return result


@web.middleware
async def unrouted(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Requests no provider route takes (unknown path, wrong method) get a JSON error and a log
    line, like every other rejection."""
    try:
        return await handler(request)
    except (web.HTTPNotFound, web.HTTPMethodNotAllowed) as exc:
        if exc.status == 404:
            answer = refuse("unknown_path")
        else:
            answer = refuse("method_not_allowed", method=request.method)
        log.info("rejected", path=request.path, method=request.method, status=exc.status,
                 reason=answer.reason)
        headers = CIMultiDict(answer.headers)
        if "Allow" in exc.headers:
            headers["Allow"] = exc.headers["Allow"]
        return ProviderResponse(status=answer.status, body=answer.body, headers=headers)
