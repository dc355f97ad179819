"""The provider-facing handler: verify, claim, forward once, record, replay.

Each step's rule lives in the core (``decide``, ``result_of``, ``failure_status``); this module
only moves bytes between the request, the store and the upstream, and writes one log line and one
metric per delivery.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web
from multidict import CIMultiDict

from sidecar.config.model import ProviderConfig
from sidecar.core.batch import filtered_body, item_digest
from sidecar.core.decision import (
    Busy,
    MirrorFailure,
    Replay,
    TakeOver,
    Wait,
    decide,
    failure_status,
)
from sidecar.core.errors import EventIdError, StoreError, VerificationError
from sidecar.core.eventid import BatchItem, batch_items, extract_event_id
from sidecar.core.events import (
    AttemptResult,
    EventRow,
    EventState,
    Outcome,
    RecordedResponse,
    StoredRequest,
)
from sidecar.core.handshake import handshake_answer
from sidecar.core.signing import verify
from sidecar.forwarding import ATTEMPT_HEADER
from sidecar.http.keys import CLOCK, CONFIG, FORWARDER, KEYRING, METRICS, OWNER, STORE
from sidecar.obs.logs import get_logger
from sidecar.upstream import read_bounded

REPLAY_HEADER = "X-Webhook-Sidecar-Replay"
STORE_RETRY_AFTER = "5"
MAX_DECISION_STEPS = 1000  # a safety bound; every step waits, answers or makes progress

log = get_logger("sidecar.delivery")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(slots=True)
class _Delivery:
    """What one request learned so far; its fields end up in the canonical log line."""

    provider: ProviderConfig
    request: web.Request
    event_id: str | None = None
    attempt: int | None = None
    result: str = "error"
    fields: dict[str, object] = field(default_factory=dict)


def delivery_handler(provider: ProviderConfig) -> Handler:
    async def handle(request: web.Request) -> web.StreamResponse:
        started = time.monotonic()
        delivery = _Delivery(provider, request)
        response = await _process(delivery)
        request.app[METRICS].events.labels(provider.key, delivery.result).inc()
        log.info(
            "delivery", provider=provider.key, event_id=delivery.event_id,
            result=delivery.result, attempt=delivery.attempt, status=response.status,
            latency_ms=round((time.monotonic() - started) * 1000, 2), **delivery.fields,
        )
        return response

    return handle


async def _process(d: _Delivery) -> web.StreamResponse:
    app, provider, request = d.request.app, d.provider, d.request
    limit = provider.max_body_bytes
    if request.content_length is not None and request.content_length > limit:
        d.result = "too_large"
        return _error(413, f"body exceeds {limit} bytes", "too_large")
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding != "identity":
        # Signatures cover the bytes as sent and the app expects them so: no decoding here.
        d.result = "bad_request"
        d.fields["reason"] = "content_encoding"
        return _error(415, f"Content-Encoding {encoding!r} is not accepted", "content_encoding")
    try:
        async with asyncio.timeout(app[CONFIG].body_read_timeout):
            body = await read_bounded(request.content, limit + 1)
    except TimeoutError:
        d.result = "bad_request"
        d.fields["reason"] = "body_timeout"
        return _error(408, "request body not received in time", "body_timeout",
                      {"Connection": "close"})
    if len(body) > limit:
        d.result = "too_large"
        return _error(413, f"body exceeds {limit} bytes", "too_large")

    keys = app[KEYRING].keys(provider.key)
    try:
        verify(provider.signature, keys, body, request.headers, app[CLOCK](),
               method=request.method, query=request.rel_url.raw_query_string)
    except VerificationError as exc:
        d.result = "invalid_signature"
        d.fields["reason"] = exc.reason
        return _error(401, "signature verification failed", exc.reason)

    if provider.replay_nonce is not None:
        try:
            replayed = await _nonce_replayed(d, body)
        except EventIdError as exc:
            d.result = "invalid_signature"
            d.fields["reason"] = "missing_nonce"
            return _error(401, "signature verification failed", f"missing_nonce: {exc.reason}")
        except StoreError as exc:
            d.result = "store_error"
            d.fields["error"] = str(exc)
            return _error(503, "event store unavailable; retry later", "store_error",
                          {"Retry-After": STORE_RETRY_AFTER})
        if replayed:
            d.result = "invalid_signature"
            d.fields["reason"] = "replayed_signature"
            return _error(401, "signature verification failed", "replayed_signature")

    if provider.handshake is not None:
        answer = handshake_answer(provider.handshake, body, request.headers, keys)
        if answer is not None:
            d.result = "handshake"
            return web.Response(status=answer.status, body=answer.body,
                                headers={"Content-Type": answer.content_type})

    try:
        if provider.event_id.is_batch:
            items = batch_items(provider.event_id, body, request.headers)
        else:
            event_id = extract_event_id(provider.event_id, body, request.headers)
    except EventIdError as exc:
        d.result = "bad_request"
        d.fields["reason"] = exc.reason
        return _error(400, "verified delivery carries no usable event id", exc.reason)

    try:
        if provider.event_id.is_batch:
            return await _deliver_batch(d, body, items)
        return await _deliver(d, body, event_id)
    except StoreError as exc:
        d.result = "store_error"
        d.fields["error"] = str(exc)
        return _error(503, "event store unavailable; retry later", "store_error",
                      {"Retry-After": STORE_RETRY_AFTER})


@dataclass(frozen=True, slots=True)
class _Mine:
    """This delivery owns the event's attempt: forward it."""

    attempt: int
    label: str  # "new" or "takeover"


@dataclass(frozen=True, slots=True)
class _Settled:
    """Nothing to forward for this event; ``result`` names why."""

    result: str  # duplicate | in_flight | mirrored_failure | payload_mismatch
    row: EventRow | None = None
    retry_after: int = 1


_Resolution = _Mine | _Settled


async def _resolve(d: _Delivery, event_id: str, digest: bytes, payload: StoredRequest | None,
                   deadline: float) -> _Resolution:
    """Claim one event id and, when another delivery has it, follow the core's decisions until
    this delivery owns an attempt or knows the answer. Waits at most until ``deadline``."""
    app, provider = d.request.app, d.provider
    store = app[STORE]
    loop = asyncio.get_running_loop()

    async def claim() -> EventRow | None:
        t0 = time.monotonic()
        result = await store.claim(provider.key, event_id, digest, provider.lease, app[OWNER],
                                   payload)
        claim_s = time.monotonic() - t0
        app[METRICS].claim_latency.labels(provider.key).observe(claim_s)
        d.fields.setdefault("claim_ms", round(claim_s * 1000, 2))
        return None if result.won else result.row

    row = await claim()
    if row is None:
        return _Mine(1, "new")
    if row.body_sha256 != digest:
        app[METRICS].payload_mismatches.labels(provider.key).inc()
        d.fields["payload_mismatch"] = True
        log.warning("payload_mismatch", provider=provider.key, event_id=event_id)
        if provider.on_payload_mismatch == "reject":
            return _Settled("payload_mismatch", row)

    waited, delay = False, 0.02
    for _ in range(MAX_DECISION_STEPS):
        if row is None:  # deleted meanwhile (operator or retention): claim afresh
            row = await claim()
            if row is None:
                return _Mine(1, "new")
        match decide(row, waited=waited, wait_left=deadline - loop.time()):
            case Replay():
                return _Settled("duplicate", row)
            case TakeOver():
                attempt = await store.take_over(provider.key, event_id, provider.lease,
                                                app[OWNER])
                if attempt is not None:
                    return _Mine(attempt, "takeover")
                row = await store.get(provider.key, event_id)  # another delivery won it
            case Wait(lease_remaining):
                pause = min(delay, max(deadline - loop.time(), 0.0), lease_remaining)
                await asyncio.sleep(pause)  # polling the row; the row is the truth
                delay = min(delay * 2, 0.25)
                waited = True
                row = await store.get(provider.key, event_id)
            case Busy(retry_after):
                return _Settled("in_flight", row, retry_after)
            case MirrorFailure(failed):
                return _Settled("mirrored_failure", failed)
    raise StoreError("event row kept changing; giving up this delivery")


async def _nonce_replayed(d: _Delivery, body: bytes) -> bool:
    """For schemes that sign a nonce but not the body: bind the nonce to this body on first
    sight; the same signed nonce with another body is a replay."""
    assert d.provider.replay_nonce is not None
    nonce = extract_event_id(d.provider.replay_nonce, body, d.request.headers)
    digest = hashlib.sha256(body).digest()
    bound = await d.request.app[STORE].bind_nonce(d.provider.key, nonce, digest)
    return bound != digest


def _payload(d: _Delivery, body: bytes) -> StoredRequest | None:
    if not d.provider.store_payload:
        return None
    request = d.request
    return StoredRequest(request.method, request.path_qs, tuple(request.headers.items()), body)


async def _deliver(d: _Delivery, body: bytes, event_id: str) -> web.StreamResponse:
    d.event_id = event_id
    deadline = asyncio.get_running_loop().time() + d.provider.inflight_wait
    resolution = await _resolve(d, event_id, hashlib.sha256(body).digest(), _payload(d, body),
                                deadline)
    if isinstance(resolution, _Mine):
        return await _forward(d, body, [(event_id, resolution.attempt)], resolution.label)
    if resolution.row is not None:
        d.attempt = resolution.row.attempt
    return _settled_response(d, resolution)


async def _deliver_batch(d: _Delivery, body: bytes, items: list[BatchItem]) -> web.StreamResponse:
    """Claim every item; forward once with the items this delivery owns (see core.batch)."""
    provider = d.provider
    d.event_id = items[0].event_id
    d.fields["batch_size"] = len(items)
    deadline = asyncio.get_running_loop().time() + provider.inflight_wait
    payload = _payload(d, body)
    mine: list[tuple[BatchItem, _Mine]] = []
    settled: list[_Settled] = []
    try:
        for item in items:
            resolution = await _resolve(d, item.event_id, item_digest(item), payload, deadline)
            if isinstance(resolution, _Mine):
                mine.append((item, resolution))
            else:
                settled.append(resolution)
    except StoreError:
        await _abandon(d, [(item.event_id, m.attempt) for item, m in mine])
        raise
    unfinished = [s for s in settled if s.result != "duplicate"]
    d.fields["batch_forwarded"] = len(mine)
    if mine:
        forward_body = filtered_body(provider.event_id, body,
                                     {item.position for item, _ in mine}, items)
        label = "new" if all(m.label == "new" for _, m in mine) else "takeover"
        response = await _forward(d, forward_body, [(i.event_id, m.attempt) for i, m in mine],
                                  label)
        if not unfinished or response.status >= 300:
            return response
        # Our items are done, but others are still in flight elsewhere or failed there:
        # the provider must retry; our items will then be duplicates.
    if unfinished:
        return _settled_response(d, unfinished[0])
    return _settled_response(d, settled[0])  # every item was already done: replay one


async def _abandon(d: _Delivery, rows: list[tuple[str, int]]) -> None:
    """Best effort: mark attempts this delivery claimed but will not forward as failed (never
    reached the app), so the next redelivery takes them over at once instead of after the
    lease. Fenced by attempt; if the store is still failing, the leases expire as after a
    crash."""
    not_sent = AttemptResult(EventState.FAILED, Outcome.CONNECT_ERROR, None, 0.0)
    store = d.request.app[STORE]
    for event_id, attempt in rows:
        with contextlib.suppress(StoreError):
            await store.complete(d.provider.key, event_id, attempt, not_sent)


def _settled_response(d: _Delivery, settled: _Settled) -> web.StreamResponse:
    d.result = settled.result
    match settled.result:
        case "duplicate":
            assert settled.row is not None
            return _replay(settled.row.response, settled.row.attempt)
        case "in_flight":
            return _error(409, "this event is being processed; retry later", "in_flight",
                          {"Retry-After": str(settled.retry_after)})
        case "payload_mismatch":
            return _error(422, "event id already seen with a different body", "payload_mismatch")
    assert settled.row is not None
    row = settled.row
    status = failure_status(row.outcome or Outcome.DISCONNECTED, row.response)
    return _error(status if status >= 300 else 502, "the attempt for this event failed; retry "
                  "later", "upstream_failed", {"Retry-After": "1"})


async def _forward(d: _Delivery, body: bytes, rows: list[tuple[str, int]],
                   label: str) -> web.StreamResponse:
    request = d.request
    d.attempt = max(attempt for _, attempt in rows)
    done = await request.app[FORWARDER].forward(
        d.provider, rows, request.method, request.path_qs, request.headers.items(), body)
    d.fields["upstream_ms"] = round(done.result.latency_ms, 2)
    if done.upstream_error:
        d.fields["upstream_error"] = done.upstream_error
    if done.record_error:
        d.fields["record_error"] = done.record_error
    if done.recorded is False:
        d.fields["superseded"] = True

    response = done.response
    if done.result.state is EventState.DONE and response is not None:
        d.result = label
        return _from_recorded(response, {ATTEMPT_HEADER: str(d.attempt)})
    d.result = "upstream_error"
    retry_after = _header(response, "Retry-After") or "1"
    if response is not None:
        return _from_recorded(response, {ATTEMPT_HEADER: str(d.attempt),
                                         "Retry-After": retry_after})
    outcome = done.result.outcome
    return _error(failure_status(outcome, None), f"upstream {outcome.value.replace('_', ' ')}",
                  outcome.value, {"Retry-After": retry_after})


def _replay(response: RecordedResponse | None, attempt: int) -> web.Response:
    extra = {REPLAY_HEADER: "true", ATTEMPT_HEADER: str(attempt)}
    if response is None:
        return web.Response(status=200, headers=extra)
    return _from_recorded(response, extra)


def _from_recorded(response: RecordedResponse, extra: dict[str, str]) -> web.Response:
    headers = CIMultiDict(response.headers)
    for name, value in extra.items():
        headers[name] = value
    return web.Response(status=response.status, body=response.body, headers=headers)


def _header(response: RecordedResponse | None, name: str) -> str | None:
    if response is None:
        return None
    lowered = name.lower()
    return next((v for n, v in response.headers if n.lower() == lowered), None)


def _error(status: int, message: str, reason: str,
           headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        status=status, text=json.dumps({"error": message, "reason": reason}),
        content_type="application/json", headers=headers,
    )


@web.middleware
async def unrouted(request: web.Request,
                   handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                   ) -> web.StreamResponse:
    """Requests no provider route takes (unknown path, wrong method) get a JSON error and a log
    line, like every other rejection."""
    try:
        return await handler(request)
    except (web.HTTPNotFound, web.HTTPMethodNotAllowed) as exc:
        reason = "unknown_path" if exc.status == 404 else "method_not_allowed"
        log.info("rejected", path=request.path, method=request.method, status=exc.status,
                 reason=reason)
        message = ("no provider is configured at this path" if exc.status == 404
                   else f"{request.method} is not accepted here; providers POST")
        headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
        return _error(exc.status, message, reason, headers)

