"""Operator actions on event rows, shared by the CLI and the admin API: list, show, release a
stuck or failed event, re-drive a failed event from its stored payload."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sidecar.config.model import Config
from sidecar.core.batch import filtered_body
from sidecar.core.eventid import batch_items
from sidecar.core.events import EventRow, EventState, StoredRequest
from sidecar.core.ports import Store
from sidecar.forwarding import Forwarder


class OperationError(Exception):
    """An operator request that cannot be carried out; ``status`` is its HTTP equivalent."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)


@dataclass(frozen=True, slots=True)
class RedriveResult:
    attempt: int
    state: str
    status: int | None  # the app's status, or None when it gave no answer
    outcome: str


def describe(row: EventRow, *, with_body: bool = False) -> dict[str, Any]:
    """A row as JSON-ready values: times as epoch seconds from the database clock, and the same
    as ISO-8601 UTC (``*_iso``). Fields are only ever added, so scripts keep working."""
    data: dict[str, Any] = {
        "provider": row.provider,
        "event_id": row.event_id,
        "state": row.state.value,
        "attempt": row.attempt,
        "received_at": row.received_at,
        "updated_at": row.updated_at,
        "age_seconds": round(row.now - row.received_at, 3),
        "lease_until": row.lease_until,
        "lease_live": row.lease_live,
        "outcome": row.outcome.value if row.outcome else None,
        "response_status": row.response.status if row.response else None,
        "latency_ms": row.latency_ms,
        "body_sha256": row.body_sha256.hex(),
        "received_at_iso": iso(row.received_at),
        "updated_at_iso": iso(row.updated_at),
        "lease_until_iso": iso(row.lease_until) if row.lease_until is not None else None,
        "updated_seconds_ago": round(row.now - row.updated_at, 3),
        "lease_seconds_left": (round(row.lease_until - row.now, 3)
                               if row.lease_until is not None else None),
    }
    if with_body and row.response is not None:
        data["response_headers"] = [list(pair) for pair in row.response.headers]
        data["response_body_base64"] = base64.b64encode(row.response.body).decode()
        data["response_body_text"] = as_text(row.response.body)
    return data


def iso(epoch: float) -> str:
    """Epoch seconds as ISO-8601 UTC with milliseconds, e.g. ``2026-11-30T13:56:01.123Z``."""
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds") \
        .replace("+00:00", "Z")


def as_text(body: bytes) -> str | None:
    """The body as text when it is UTF-8, else None (the caller shows base64)."""
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return None


def describe_request(payload: StoredRequest) -> dict[str, Any]:
    """The stored first request (``store_payload: true``): as received, signature headers
    included (the operator reading it can read the database too)."""
    text = as_text(payload.body)
    return {
        "method": payload.method,
        "path": payload.path,
        "headers": [list(pair) for pair in payload.headers],
        "body_text": text,
        "body_base64": base64.b64encode(payload.body).decode() if text is None else None,
    }


async def list_events(store: Store, *, provider: str | None = None,
                      state: str | None = None, older_than: float | None = None,
                      limit: int = 100) -> list[dict[str, Any]]:
    try:
        state_value = EventState(state) if state else None
    except ValueError as exc:
        raise OperationError(400, "state must be processing, done or failed") from exc
    if not 1 <= limit <= 10_000:
        raise OperationError(400, "limit must be between 1 and 10000")
    rows = await store.list_events(provider=provider, state=state_value, limit=limit,
                                   older_than_seconds=older_than)
    return [describe(row) for row in rows]


async def show(store: Store, provider: str, event_id: str) -> dict[str, Any]:
    row = await store.get(provider, event_id)
    if row is None:
        raise OperationError(404, f"no event {provider}:{event_id}")
    data = describe(row, with_body=True)
    payload = await store.get_payload(provider, event_id)
    data["payload_stored"] = payload is not None
    data["request"] = describe_request(payload) if payload is not None else None
    return data


async def release(store: Store, provider: str, event_id: str, *,
                  force: bool = False) -> dict[str, Any]:
    """Mark a ``failed`` event, or a ``processing`` one whose lease has expired (its process is
    gone), ``failed`` with no lease, so the next redelivery is forwarded. A ``processing`` event
    whose lease is still live is released only with ``force``: its attempt may still be running,
    and a redelivery would then reach the app a second time, concurrently. The store checks the
    lease in the statement that updates the row, so an attempt renewed in between is kept.

    The answer is :func:`show`'s, with ``forced_live_lease`` true when a live attempt was
    released (the caller warns the operator)."""
    before = await store.get(provider, event_id) if force else None
    if not await store.release(provider, event_id, force=force):
        row = await store.get(provider, event_id)
        if row is None:
            raise OperationError(404, f"no event {provider}:{event_id}")
        if row.state is EventState.PROCESSING:
            left = (row.lease_until or row.now) - row.now
            raise OperationError(
                409, f"event {provider}:{event_id} is processing under a live lease (attempt "
                     f"{row.attempt}, {left:.0f}s left): its attempt may still be running. "
                     "Wait for the lease to expire, or force the release once you know its "
                     "process is gone (CLI --force, admin API ?force=true); a redelivery "
                     "would otherwise reach the app twice at once")
        raise OperationError(409, f"event {provider}:{event_id} is {row.state.value}; only "
                                  "processing or failed events can be released")
    data = await show(store, provider, event_id)
    data["forced_live_lease"] = bool(
        before is not None and before.state is EventState.PROCESSING and before.lease_live)
    return data


async def redrive(config: Config, store: Store, forwarder: Forwarder, owner: str,
                  provider_key: str, event_id: str) -> RedriveResult:
    """Forward a failed (or crashed) event again from its stored request, as attempt + 1."""
    provider = config.provider(provider_key)
    if provider is None:
        raise OperationError(404, f"no provider {provider_key!r} in the config")
    payload = await store.get_payload(provider_key, event_id)
    if payload is None:
        if await store.get(provider_key, event_id) is None:
            raise OperationError(404, f"no event {provider_key}:{event_id}")
        raise OperationError(409, f"no stored payload for {provider_key}:{event_id} "
                                  "(set store_payload: true on the provider to keep them)")
    attempt = await store.take_over(provider_key, event_id, provider.lease, owner)
    if attempt is None:
        row = await store.get(provider_key, event_id)
        state = row.state.value if row else "gone"
        raise OperationError(409, f"event {provider_key}:{event_id} is {state}; only failed "
                                  "events or expired attempts can be re-driven")
    body = payload.body
    if provider.event_id.is_batch:
        # The stored request is the batch that first carried this event: send only this item.
        items = batch_items(provider.event_id, body, dict(payload.headers))
        body = filtered_body(provider.event_id, body,
                             {i.position for i in items if i.event_id == event_id}, items)
    done = await forwarder.forward(provider, [(event_id, attempt)], payload.method,
                                   payload.path, payload.headers, body)
    return RedriveResult(
        attempt=attempt, state=done.result.state.value,
        status=done.response.status if done.response else None,
        outcome=done.result.outcome.value,
    )
