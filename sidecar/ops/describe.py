"""Event rows, queue entries, attempts and stored requests as JSON-ready values: what the CLI
prints, the admin API answers and the inspector shows. Times are epoch seconds from the
database clock, each also as ISO-8601 UTC (``*_iso``); fields are only ever added."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

from sidecar.core.events import Attempt, EventRow, QueueEntry, StoredRequest


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


def describe_queue(entry: QueueEntry) -> dict[str, Any]:
    """A queue entry as JSON-ready values (times as in :func:`describe`). ``due_at`` is None
    for a dead entry; while a worker holds the event it is when the worker's lease ends."""
    return {
        "dead": entry.due_at is None,
        "due_at": entry.due_at,
        "due_at_iso": iso(entry.due_at) if entry.due_at is not None else None,
        "due_in_seconds": (round(entry.due_at - entry.now, 3)
                           if entry.due_at is not None else None),
        "tries": entry.tries,
        "queued_at": entry.queued_at,
        "queued_at_iso": iso(entry.queued_at),
        "queued_seconds_ago": round(entry.now - entry.queued_at, 3),
        "order_key": entry.order_key,
        "last_error": entry.last_error,
    }


def describe_attempt(attempt: Attempt) -> dict[str, Any]:
    """One recorded attempt as JSON-ready values (times as in :func:`describe`)."""
    return {
        "attempt": attempt.attempt,
        "started_at": attempt.started_at,
        "started_at_iso": iso(attempt.started_at),
        "finished_at": attempt.finished_at,
        "finished_at_iso": iso(attempt.finished_at),
        "duration_ms": attempt.latency_ms,
        "owner": attempt.owner,
        "outcome": attempt.outcome.value,
        "status": attempt.status,
        "state": attempt.state.value,
        "error": attempt.error,
    }


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
