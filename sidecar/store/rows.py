"""Rows as both SQL adapters read and write them: one mapping between database records
(asyncpg ``Record`` or ``sqlite3.Row``, both indexable by column name) and the core's values."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from sidecar.core.breaker import BreakerState, Pause, ProviderState
from sidecar.core.events import (
    Attempt,
    AttemptResult,
    EventRow,
    EventState,
    NonceBinding,
    Outcome,
    QueuedWork,
    QueueEntry,
    QueueStats,
    RecordedResponse,
    Settlement,
    StoredRequest,
    headers_from_json,
    headers_to_json,
)
from sidecar.core.listing import EventPage, EventQuery, PageKey

Params = Mapping[str, object]
"""The values of one statement's named parameters (``:provider`` → ``params["provider"]``)."""


class Record(Protocol):
    def __getitem__(self, key: str) -> Any: ...


def _float(value: Any) -> float | None:
    return float(value) if value is not None else None


def event_row(record: Record) -> EventRow:
    """An ``EventRow`` from a record with the columns of the ``get`` queries
    (``event_row.fragment.sql`` and ``in_queue``)."""
    status = record["response_status"]
    response: RecordedResponse | None = None
    if status is not None:
        raw_headers = record["response_headers"]
        pairs = json.loads(raw_headers) if raw_headers is not None else []
        response = RecordedResponse(
            status=int(status),
            headers=headers_from_json(pairs),
            body=bytes(record["response_body"] or b""),
        )
    outcome = record["outcome"]
    return EventRow(
        provider=record["provider"],
        event_id=record["event_id"],
        state=EventState(record["state"]),
        attempt=int(record["attempt"]),
        body_sha256=bytes(record["body_sha256"]),
        received_at=float(record["received_at"]),
        updated_at=float(record["updated_at"]),
        lease_until=_float(record["lease_until"]),
        outcome=Outcome(outcome) if outcome is not None else None,
        response=response,
        latency_ms=_float(record["latency_ms"]),
        now=float(record["now"]),
        in_queue=bool(record["in_queue"]),
    )


def attempt(record: Record) -> Attempt:
    """An ``Attempt`` from a record with the columns of the ``attempts`` queries."""
    status = record["response_status"]
    return Attempt(
        attempt=int(record["attempt"]),
        started_at=float(record["started_at"]),
        finished_at=float(record["finished_at"]),
        owner=process_owner(record["owner"]),
        outcome=Outcome(record["outcome"]),
        status=int(status) if status is not None else None,
        latency_ms=float(record["latency_ms"]),
        state=EventState(record["state"]),
        error=record["error"],
    )


def process_owner(lease_owner: str | None) -> str | None:
    """The process's owner id in a lease owner as the SQL stores write it: the call token
    (``#…``, ``owners.call_owner``) that tells one call's rows from another's is left out."""
    if lease_owner is None:
        return None
    owner, token, _ = lease_owner.rpartition("#")
    return owner if token else lease_owner


def page_params(query: EventQuery) -> dict[str, object]:
    """The parameters of ``list_page.sql`` and ``list_page_queue.sql`` for ``query``."""
    after = query.after
    return {
        "providers": json.dumps(list(query.providers)),
        "cursor_us": after.received_us if after is not None else None,
        "cursor_provider": after.provider if after is not None else None,
        "cursor_event_id": after.event_id if after is not None else None,
        "received_after": _float(query.received_after),
        "received_before": _float(query.received_before),
        "state": query.state.value if query.state is not None else None,
        "id_prefix": query.id_prefix,
        "status_class": query.status_class.value if query.status_class is not None else None,
        "outcome": query.outcome.value if query.outcome is not None else None,
        "limit": int(query.limit),
    }


def event_page(records: Sequence[Record], limit: int) -> EventPage:
    """A page from the ``list_page`` queries' records (up to ``limit`` + 1 of them, the extra
    one telling that older rows pass the filters): the next cursor is the last kept row's key,
    read exactly from its ``received_us`` column."""
    kept = records[:limit]
    last = kept[-1] if len(records) > limit and kept else None
    return EventPage(
        rows=tuple(event_row(r) for r in kept),
        next=(PageKey(int(last["received_us"]), str(last["provider"]), str(last["event_id"]))
              if last is not None else None),
    )


def nonce_binding(record: Record) -> NonceBinding:
    """A ``NonceBinding`` from a record with the columns of ``binding.fragment.sql``."""
    return NonceBinding(digest=bytes(record["body_sha256"]),
                        received_at=float(record["received_at"]), now=float(record["now"]))


def guard_binding(record: Record) -> NonceBinding | None:
    """A guarded claim's binding, from a record with the columns of ``guard.fragment.sql``
    (PostgreSQL's claim queries), or None: no guard, or none settled by the statement."""
    digest = record["guard_sha256"]
    if digest is None:
        return None
    return NonceBinding(digest=bytes(digest), received_at=float(record["guard_received_at"]),
                        now=float(record["guard_now"]))


def stored_request(record: Record) -> StoredRequest | None:
    """The payload of a record with the columns of the ``get_payload`` queries, or None when the
    provider keeps no payloads."""
    meta = record["payload_request"]
    if meta is None:
        return None
    return StoredRequest.from_stored(bytes(record["payload_body"] or b""), meta)


def result_values(result: AttemptResult) -> dict[str, Any]:
    """The columns ``complete`` writes for an attempt's result."""
    if result.state is EventState.PROCESSING:
        raise ValueError("an attempt's result must be DONE or FAILED, not PROCESSING")
    response = result.response
    return {
        "state": result.state.value,
        "outcome": result.outcome.value,
        "response_status": response.status if response else None,
        "response_headers": (json.dumps(headers_to_json(response.headers))
                             if response else None),
        "response_body": response.body if response else None,
        "latency_ms": float(result.latency_ms),
    }


# -- queue mode ------------------------------------------------------------------------------

_SETTLED: frozenset[EventState] = frozenset({EventState.DONE, EventState.QUEUED,
                                             EventState.DEAD})


def queued_work(record: Record, provider: str) -> QueuedWork:
    """A ``QueuedWork`` from a record with the columns of the ``take_queued`` queries."""
    request = stored_request(record)
    if request is None:  # enqueue always stores the request: a row written by hand
        raise ValueError(f"queued event {provider}:{record['event_id']} has no stored request")
    return QueuedWork(
        provider=provider,
        event_id=record["event_id"],
        attempt=int(record["attempt"]),
        tries=int(record["tries"]),
        round_attempts=int(record["round_attempts"]),
        queued_at=float(record["queued_at"]),
        now=float(record["now"]),
        request=request,
    )


def settle_values(settlement: Settlement) -> dict[str, Any]:
    """The columns ``settle_queued`` writes for how a try ended: the row's new state and the
    try's result, the entry's retry delay (seconds) and error, and whether the app was
    reached."""
    if settlement.state not in _SETTLED:
        raise ValueError(f"a try settles DONE, QUEUED or DEAD, not {settlement.state.name}")
    return {
        **result_values(settlement.result),
        "state": settlement.state.value,
        "retry_in": float(settlement.retry_in or 0.0),
        "reached": bool(settlement.reached),
        "error": settlement.error,
    }


def queue_entry(record: Record) -> QueueEntry:
    """A ``QueueEntry`` from a record with the columns of the ``queue_entry`` queries."""
    return QueueEntry(
        provider=record["provider"],
        event_id=record["event_id"],
        due_at=_float(record["due_at"]),
        tries=int(record["tries"]),
        queued_at=float(record["queued_at"]),
        order_key=record["order_key"],
        last_error=record["last_error"],
        now=float(record["now"]),
    )


def queue_stats(record: Record) -> QueueStats:
    """One provider's ``QueueStats`` from a record of the ``queue_stats`` queries."""
    return QueueStats(
        pending=int(record["pending"]),
        dead=int(record["dead"]),
        oldest_pending_seconds=max(0.0, float(record["oldest_pending_seconds"])),
    )


def provider_state(record: Record) -> ProviderState:
    """A ``ProviderState`` from a record with the ``provider_state.fragment.sql`` columns."""
    paused_at = record["paused_at"]
    paused = (Pause(float(paused_at), record["paused_by"] or "", record["pause_reason"] or "")
              if paused_at is not None else None)
    return ProviderState(
        provider=record["provider"],
        paused=paused,
        breaker=BreakerState(record["breaker"]),
        failures=int(record["failures"]),
        failures_since=_float(record["failures_since"]),
        last_failure=record["last_failure"],
        opened_at=_float(record["opened_at"]),
        open_until=_float(record["open_until"]),
        probe_owner=record["probe_owner"],
        probe_until=_float(record["probe_until"]),
        now=float(record["now"]),
    )


def new_row_values(provider: str, event_id: str, body_sha256: bytes,
             request: StoredRequest | None) -> dict[str, object]:
    """The columns of a new event row that ``claim`` and ``enqueue`` insert alike: its key,
    the body's hash and the stored request (``payload_*``: NULL when none is kept)."""
    return {
        "provider": provider,
        "event_id": event_id,
        "body_sha256": body_sha256,
        "payload_body": request.body if request is not None else None,
        "payload_request": request.meta_json() if request is not None else None,
    }
