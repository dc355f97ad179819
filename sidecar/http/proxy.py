"""The provider-facing handler: verify, claim, forward once, record, replay.

Each step's rule lives in the core (``decide``, ``result_of``, ``failure_status``); this module
only moves bytes between the request, the store and the upstream, and writes one log line and one
metric per delivery.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web
from multidict import CIMultiDict

from sidecar.config.model import ProviderConfig
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
from sidecar.core.eventid import extract_event_id
from sidecar.core.events import EventRow, EventState, Outcome, RecordedResponse, StoredRequest
from sidecar.core.handshake import handshake_answer
from sidecar.core.signing import verify
from sidecar.forwarding import ATTEMPT_HEADER
from sidecar.http.keys import CLOCK, FORWARDER, KEYRING, METRICS, OWNER, STORE
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
    body = await read_bounded(request.content, limit + 1)
    if len(body) > limit:
        d.result = "too_large"
        return _error(413, f"body exceeds {limit} bytes", "too_large")

    try:
        verify(provider.signature, app[KEYRING].keys(provider.key), body, request.headers,
               app[CLOCK]())
    except VerificationError as exc:
        d.result = "invalid_signature"
        d.fields["reason"] = exc.reason
        return _error(401, "signature verification failed", exc.reason)

    if provider.handshake is not None:
        answer = handshake_answer(provider.handshake, body)
        if answer is not None:
            d.result = "handshake"
            return web.json_response(answer)

    try:
        d.event_id = extract_event_id(provider.event_id, body, request.headers)
    except EventIdError as exc:
        d.result = "bad_request"
        d.fields["reason"] = exc.reason
        return _error(400, "verified delivery carries no usable event id", exc.reason)

    try:
        return await _deliver(d, body)
    except StoreError as exc:
        d.result = "store_error"
        d.fields["error"] = str(exc)
        return _error(503, "event store unavailable; retry later", "store_error",
                      {"Retry-After": STORE_RETRY_AFTER})


async def _deliver(d: _Delivery, body: bytes) -> web.StreamResponse:
    app, provider = d.request.app, d.provider
    store, event_id = app[STORE], d.event_id
    assert event_id is not None
    body_sha256 = hashlib.sha256(body).digest()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + provider.inflight_wait

    payload = (StoredRequest(d.request.method, d.request.path_qs,
                             tuple(d.request.headers.items()), body)
               if provider.store_payload else None)
    t0 = time.monotonic()
    claim = await store.claim(provider.key, event_id, body_sha256, provider.lease, app[OWNER],
                              payload)
    claim_s = time.monotonic() - t0
    app[METRICS].claim_latency.labels(provider.key).observe(claim_s)
    d.fields["claim_ms"] = round(claim_s * 1000, 2)
    if claim.won:
        return await _forward(d, body, claim.row.attempt, "new")

    if claim.row.body_sha256 != body_sha256:
        app[METRICS].payload_mismatches.labels(provider.key).inc()
        d.fields["payload_mismatch"] = True
        log.warning("payload_mismatch", provider=provider.key, event_id=event_id)
        if provider.on_payload_mismatch == "reject":
            d.result = "payload_mismatch"
            return _error(422, "event id already seen with a different body", "payload_mismatch")

    row: EventRow | None = claim.row
    waited, delay = False, 0.02
    for _ in range(MAX_DECISION_STEPS):
        if row is None:  # deleted meanwhile (operator or retention): claim afresh
            claim = await store.claim(provider.key, event_id, body_sha256, provider.lease,
                                      app[OWNER], payload)
            if claim.won:
                return await _forward(d, body, claim.row.attempt, "new")
            row = claim.row
        decision = decide(row, waited=waited, wait_left=deadline - loop.time())
        d.attempt = row.attempt
        match decision:
            case Replay(response):
                d.result = "duplicate"
                return _replay(response, row.attempt)
            case TakeOver():
                attempt = await store.take_over(provider.key, event_id, provider.lease,
                                                app[OWNER])
                if attempt is not None:
                    return await _forward(d, body, attempt, "takeover")
                row = await store.get(provider.key, event_id)  # another delivery won it
            case Wait(lease_remaining):
                pause = min(delay, max(deadline - loop.time(), 0.0), lease_remaining)
                await asyncio.sleep(pause)  # polling the row; the row is the truth
                delay = min(delay * 2, 0.25)
                waited = True
                row = await store.get(provider.key, event_id)
            case Busy(retry_after):
                d.result = "in_flight"
                return _error(409, "this event is being processed; retry later", "in_flight",
                              {"Retry-After": str(retry_after)})
            case MirrorFailure(failed):
                d.result = "mirrored_failure"
                status = failure_status(failed.outcome or Outcome.DISCONNECTED, failed.response)
                return _error(status if status >= 300 else 502, "the attempt for this event "
                              "failed; retry later", "upstream_failed", {"Retry-After": "1"})
    raise StoreError("event row kept changing; giving up this delivery")


async def _forward(d: _Delivery, body: bytes, attempt: int, label: str) -> web.StreamResponse:
    request = d.request
    assert d.event_id is not None
    d.attempt = attempt
    done = await request.app[FORWARDER].forward(
        d.provider, d.event_id, attempt, request.method, request.path_qs,
        request.headers.items(), body)
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
        return _from_recorded(response, {ATTEMPT_HEADER: str(attempt)})
    d.result = "upstream_error"
    retry_after = _header(response, "Retry-After") or "1"
    if response is not None:
        return _from_recorded(response, {ATTEMPT_HEADER: str(attempt), "Retry-After": retry_after})
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
