"""Operator actions on event rows, shared by the CLI and the admin API: list, show, release a
stuck or failed event, re-drive a failed event from its stored payload."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from sidecar.config.model import Config
from sidecar.core.batch import filtered_body
from sidecar.core.eventid import batch_items
from sidecar.core.events import EventRow, EventState
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
    """A row as JSON-ready values (times as epoch seconds from the database clock)."""
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
    }
    if with_body and row.response is not None:
        data["response_headers"] = [list(pair) for pair in row.response.headers]
        data["response_body_base64"] = base64.b64encode(row.response.body).decode()
    return data


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
    data["payload_stored"] = await store.get_payload(provider, event_id) is not None
    return data


async def release(store: Store, provider: str, event_id: str) -> dict[str, Any]:
    """Mark a stuck (``processing``) or ``failed`` event ``failed`` with no lease, so the next
    redelivery is forwarded. Releasing a live attempt risks a second concurrent forward; the
    operator is trusted to have checked it is stuck."""
    if not await store.release(provider, event_id):
        row = await store.get(provider, event_id)
        if row is None:
            raise OperationError(404, f"no event {provider}:{event_id}")
        raise OperationError(409, f"event {provider}:{event_id} is {row.state.value}; only "
                                  "processing or failed events can be released")
    return await show(store, provider, event_id)


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
