"""One attempt: send a delivery to the app, classify the answer, record it on the row.

Shared by the delivery pipeline and by operators re-driving a stored event.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from sidecar.config.model import ProviderConfig
from sidecar.core import phases
from sidecar.core.batch import batch_key
from sidecar.core.decision import result_of, status_class
from sidecar.core.errors import StoreClosed, StoreError, UpstreamError
from sidecar.core.events import (
    AttemptResult,
    EventRow,
    EventState,
    Forwarded,
    Outcome,
    Recorded,
    RecordedResponse,
    StoredRequest,
)
from sidecar.core.headers import (
    ATTEMPT_HEADER,
    BATCH_SIZE_HEADER,
    EVENT_HEADER,
    IDEMPOTENCY_HEADER,
    PROVIDER_HEADER,
    UNCLAIMED_HEADER,
)
from sidecar.core.hops import forwardable_headers
from sidecar.core.ports import EventStore, RowReader
from sidecar.core.signing.forward import forward_signature
from sidecar.core.tracing import NO_TRACER, Attributes, Span, SpanKind, Tracer
from sidecar.obs.logs import get_logger
from sidecar.obs.metrics import Metrics

log = get_logger("sidecar.forwarding")

RECORD_FIRST_PAUSE = 0.05  # seconds before a failed result write is tried again; doubles...
RECORD_MAX_PAUSE = 1.0  # ...up to this
LEASE_MARGIN = 1.0  # result writes are not retried in the last second before the lease ends


@dataclass(frozen=True, slots=True)
class Sent:
    """One send to the app, classified; not yet recorded."""

    result: AttemptResult
    response: RecordedResponse | None  # None when the app gave no HTTP answer
    error: str | None  # what went wrong reaching the app


class Sender(Protocol):
    """Sends one request to the app (``sidecar.forwarding.upstream.Upstream``, or a test double)."""

    async def send(self, method: str, path_qs: str, headers: list[tuple[str, str]],
                   body: bytes) -> RecordedResponse: ...


def _unsigned(provider: str) -> Sequence[bytes]:
    return ()


def destination_attributes(provider: ProviderConfig) -> Attributes:
    """A span's destination attribute: a destination's route names it."""
    return {} if provider.destination is None else {"webhook.destination": provider.destination}


class Forwarder:
    """``upstream``: the client to the app, or one per provider key (``Upstreams``: each
    provider's deliveries go to its own upstream). ``signing_keys``: a provider's current
    forward-signing keys (file secrets are re-read)."""

    def __init__(self, store: EventStore, upstream: Sender | Mapping[str, Sender],
                 metrics: Metrics, pending: set[asyncio.Task[bool]], *,
                 signing_keys: Callable[[str], Sequence[bytes]] = _unsigned,
                 clock: Callable[[], float] = time.time, tracer: Tracer = NO_TRACER) -> None:
        self._store = store
        self._upstream = upstream
        self._metrics = metrics
        self._pending = pending  # result writes in progress, awaited on shutdown
        self._signing_keys = signing_keys
        self._clock = clock
        self._tracer = tracer

    def _sender(self, provider: str) -> Sender:
        upstream = self._upstream
        return upstream[provider] if isinstance(upstream, Mapping) else upstream

    async def forward(self, provider: ProviderConfig, rows: Sequence[tuple[str, int]],
                      request: StoredRequest) -> Forwarded:
        """Forward ``request`` once on behalf of ``rows`` (``(event_id, attempt)`` pairs: one,
        or the items a batch delivery claimed) and record the result on each of them."""
        attempt = max(attempt for _, attempt in rows)
        # The rows' leases began at their claims, just before this forward — for a batch up to
        # inflight_wait before (its items are claimed in turn, waiting on in-flight ones).
        lease_ends = (asyncio.get_running_loop().time() + provider.lease
                      - (provider.inflight_wait if provider.event_id.is_batch else 0.0))
        sent = await self.send(provider, [event_id for event_id, _ in rows], attempt, request)
        with self._tracer.span("record", attributes=self.record_attributes("complete")) as span:
            recorded, record_error = await self._record(provider.key, rows, sent.result,
                                                        lease_ends - LEASE_MARGIN)
            phases.mark("complete_return")
            if recorded is not Recorded.WRITTEN:
                span.set_attribute("webhook.recorded", recorded.value)
            if recorded is Recorded.FAILED:
                span.set_attribute("error.type", "store_error")
        return Forwarded(attempt, sent.result, sent.response, sent.error, recorded,
                         record_error)

    async def send(self, provider: ProviderConfig, ids: Sequence[str], attempt: int,
                   request: StoredRequest, *, unclaimed: bool = False) -> Sent:
        """Send ``request`` once to the app on behalf of the events ``ids``, telling it
        ``attempt``, and classify its answer (nothing recorded: the caller writes the
        result). ``unclaimed``: no row holds the events (the store could not be reached):
        the app is told so instead of an attempt number."""
        # A destination's route tells the app its provider's key, so that every destination
        # dedupes on the same Idempotency-Key.
        key = provider.provider_key
        added = {PROVIDER_HEADER: key}
        if unclaimed:
            added[UNCLAIMED_HEADER] = "true"
        else:
            added[ATTEMPT_HEADER] = str(attempt)
        if provider.event_id.is_batch:
            # Items are grouped per delivery, so the key names this group; apps dedupe per
            # item id, which each item in the body carries.
            added[IDEMPOTENCY_HEADER] = batch_key(key, ids)
            added[BATCH_SIZE_HEADER] = str(len(ids))
        else:
            added[IDEMPOTENCY_HEADER] = f"{key}:{ids[0]}"
            added[EVENT_HEADER] = ids[0]
        keys = self._signing_keys(provider.key)
        if keys:
            # Signed at each forward, so a re-drive hours later still verifies; replaces any
            # webhook-* headers of a Standard Webhooks provider, in every spelling (the app
            # verifies the proxy; see forwardable_headers).
            added.update(forward_signature(keys, added[IDEMPOTENCY_HEADER], request.body,
                                           self._clock()))
        if not self._tracer.enabled:
            return await self._exchange(provider, request, added)
        # url.full: the app's URL and the path; never the query, which may carry a token,
        # nor a password in the app's URL.
        app_url = provider.upstream.url or ""
        with self._tracer.span("forward", SpanKind.CLIENT, {
                **_app_attributes(app_url), "http.request.method": request.method,
                "url.full": _redacted(app_url).rstrip("/") + request.path.partition("?")[0],
                "webhook.provider": key, "webhook.attempt": attempt,
                **destination_attributes(provider)}) as span:
            # The app's trace continues from this span; an inbound traceparent is replaced
            # (forwardable_headers drops inbound headers the proxy sets).
            added.update(self._tracer.headers())
            sent = await self._exchange(provider, request, added)
            _describe(span, sent)
            return sent

    async def _exchange(self, provider: ProviderConfig, request: StoredRequest,
                        added: dict[str, str]) -> Sent:
        started = time.monotonic()
        response: RecordedResponse | None = None
        error: str | None = None
        origin = provider.upstream.origin  # the metrics' upstream label
        try:
            with self._metrics.forwards_in_flight.labels(provider.key,
                                                         origin).track_inprogress():
                headers = forwardable_headers(request.headers, added)
                phases.mark("forward_prepare")
                response = await self._sender(provider.key).send(
                    request.method, request.path, headers, request.body)
            outcome = Outcome.RESPONSE
        except UpstreamError as exc:
            outcome = exc.outcome
            error = exc.detail or exc.outcome.value
        elapsed = time.monotonic() - started
        phases.mark("forward")
        self._metrics.upstream_latency.labels(provider.key, origin).observe(elapsed)
        result = result_of(outcome, response, elapsed * 1000, provider.final_statuses)
        self._metrics.app_answers.labels(provider.key, origin, status_class(response)).inc()
        return Sent(result, response, error)

    def record_attributes(self, operation: str) -> Attributes:
        """A result write's span attributes (the database semantic conventions)."""
        system = self._tracer.db_system
        return {"db.system": system, "db.system.name": system, "db.operation": operation,
                "db.operation.name": operation}

    async def _record(self, provider: str, rows: Sequence[tuple[str, int]],
                      result: AttemptResult, until: float) -> tuple[Recorded, str | None]:
        """Write the result on every row (``shielded``). A failed write is tried again until
        ``until`` (loop time, before the leases end)."""
        outcomes = await shielded(
            [self._write(provider, event_id, attempt, result, until)
             for event_id, attempt in rows], self._pending)
        error: str | None = None
        for (event_id, attempt), outcome in zip(rows, outcomes, strict=True):
            if isinstance(outcome, StoreError):
                # The app has answered; we could not record it. The row stays `processing`
                # until its lease expires, then a redelivery is forwarded again (attempt + 1).
                log.error("record_failed", provider=provider, event_id=event_id,
                          attempt=attempt, error=str(outcome))
                error = error or str(outcome)
            elif isinstance(outcome, BaseException):
                raise outcome
            elif not outcome:
                self._metrics.superseded.labels(provider).inc()
                log.warning("attempt_superseded", provider=provider, event_id=event_id,
                            attempt=attempt)
        if error is not None:
            return Recorded.FAILED, error
        return (Recorded.WRITTEN if all(outcomes) else Recorded.SUPERSEDED), None

    async def _write(self, provider: str, event_id: str, attempt: int, result: AttemptResult,
                     until: float) -> bool:
        return await write_until(
            lambda: self._store.complete(provider, event_id, attempt, result),
            lambda row: holds(row, attempt, result.state, result),
            self._store, provider, event_id, attempt, until)


@functools.lru_cache(maxsize=64)  # per span: once per upstream URL (the result is not mutated)
def _app_attributes(app_url: str) -> dict[str, str | int]:
    """The app's address as forward spans name it: ``server.address``, ``server.port``."""
    if not app_url:
        return {}
    parts = urlsplit(app_url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return {"server.address": parts.hostname or "", "server.port": port}


@functools.lru_cache(maxsize=64)
def _redacted(url: str) -> str:
    """``url`` with any credentials in it replaced, as the HTTP semantic conventions ask of
    ``url.full`` (``REDACTED:REDACTED@``): an upstream URL may carry Basic auth."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"REDACTED:REDACTED@{host}"))


def _describe(span: Span, sent: Sent) -> None:
    """The app's answer on the forward's span: its status, or the error (HTTP client
    semantic conventions: a 4xx or 5xx is an error of the client span)."""
    if sent.response is not None:
        span.set_attribute("http.response.status_code", sent.response.status)
        if sent.response.status >= 400:
            span.set_attribute("error.type", str(sent.response.status))
    else:
        span.set_attribute("error.type", sent.result.outcome.value)


async def shielded(writes: Iterable[Coroutine[Any, Any, bool]],
                   pending: set[asyncio.Task[bool]]) -> list[bool | BaseException]:
    """Run result writes protected from cancellation of the caller (a shutdown past its
    timeout, or a client that went away): all are started before any is awaited, go on
    regardless, and are in ``pending`` (awaited on shutdown) until they end. Their answers,
    or what they raised, in order."""
    tasks = [asyncio.ensure_future(write) for write in writes]
    for task in tasks:
        pending.add(task)
        task.add_done_callback(pending.discard)
    if len(tasks) == 1:
        # One write (every single-event delivery): shielded as it is, without gather's future,
        # one event-loop turn less before the answer goes out (bench.lone).
        try:
            return [await asyncio.shield(tasks[0])]
        except Exception as exc:
            return [exc]
    return await asyncio.shield(asyncio.gather(*tasks, return_exceptions=True))


async def write_until(write: Callable[[], Awaitable[bool]],
                      holds: Callable[[EventRow | None], bool], store: RowReader, provider: str,
                      event_id: str, attempt: int, until: float) -> bool:
    """One row's result write (``write``; ``holds`` tells from the row whether it landed).
    The app has answered, so the write is not given up on at the first store error: it is
    tried again (the store opens a new connection for a failed one) after a pause that
    doubles from 50 ms up to 1 s, while the lease lasts. Past ``until`` (just before the
    lease ends) another delivery may take the event over: no try starts then, and one in
    progress is cancelled (the fence would refuse it after a take-over anyway). It also
    stops when the store is closed (shutdown, after the drain's wait). Raises the last
    ``StoreError``."""
    loop = asyncio.get_running_loop()
    pause = RECORD_FIRST_PAUSE
    tries = 0
    error: StoreError | None = None
    while True:
        tries += 1
        try:
            # The first try is bounded by the store alone, however late it comes.
            async with asyncio.timeout_at(until if tries > 1 else None):
                written = await write()
            break
        except StoreClosed:
            raise
        except StoreError as exc:
            error = exc
        except TimeoutError as exc:
            if error is None:  # not the lease's bound: only retries have one
                raise
            raise StoreError(f"{error} (the lease ends: no more tries)") from exc
        left = until - loop.time()
        if left <= 0:
            raise error
        if tries == 1:
            log.warning("record_retrying", provider=provider, event_id=event_id,
                        attempt=attempt, error=str(error), retry_for_s=round(left, 1))
        await asyncio.sleep(min(pause, left))
        pause = min(pause * 2, RECORD_MAX_PAUSE)
    if tries > 1:
        if not written:
            # A failed try may have committed before its answer was lost: then this one
            # found nothing to write. The row tells whether it holds this very result.
            written = holds(await store.get(provider, event_id))
        log.info("record_recovered", provider=provider, event_id=event_id,
                 attempt=attempt, tries=tries)
    return written


def holds(row: EventRow | None, attempt: int, state: EventState,
          result: AttemptResult) -> bool:
    """Whether ``row`` holds exactly ``result`` as the outcome of ``attempt``, in ``state``:
    a write whose answer was lost, that committed."""
    return (row is not None and row.attempt == attempt and row.state is state
            and row.outcome is result.outcome and row.response == result.response
            and row.latency_ms == result.latency_ms)
