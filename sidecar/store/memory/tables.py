"""The memory store's tables: its rows (mutable: the verbs change them in place), and what
every verb does first."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass

from sidecar.core.breaker import ProviderState
from sidecar.core.errors import RowLocked, StoreClosed
from sidecar.core.events import (
    Attempt,
    AttemptResult,
    EventRow,
    EventState,
    Outcome,
    RecordedResponse,
    StoredRequest,
)

Key = tuple[str, str]  # (provider, event_id)


@dataclass(slots=True)
class Event:
    """One stored row."""

    provider: str
    event_id: str
    body_sha256: bytes
    received_at: float
    payload: StoredRequest | None
    state: EventState = EventState.PROCESSING
    attempt: int = 1
    updated_at: float = 0.0
    lease_owner: str | None = None
    lease_until: float | None = None
    outcome: Outcome | None = None
    response: RecordedResponse | None = None
    latency_ms: float | None = None

    def read(self, now: float, *, in_queue: bool) -> EventRow:
        return EventRow(
            provider=self.provider, event_id=self.event_id, state=self.state,
            attempt=self.attempt, body_sha256=self.body_sha256, received_at=self.received_at,
            updated_at=self.updated_at, lease_until=self.lease_until, outcome=self.outcome,
            response=self.response, latency_ms=self.latency_ms, now=now, in_queue=in_queue,
        )

    def lease_expired(self, now: float) -> bool:
        """A processing row without a lease counts as expired, as does one ending exactly now
        (as ``EventRow.lease_live`` and the SQL stores have it)."""
        return self.lease_until is None or self.lease_until <= now

    def stuck(self, now: float) -> bool:
        """Processing with a lease that has ended. Unlike ``lease_expired``, a row without a
        lease is not counted (in SQL, ``NULL <= now`` is not true)."""
        return (self.state is EventState.PROCESSING and self.lease_until is not None
                and self.lease_until <= now)

    def received_before(self, cutoff: float) -> bool:
        return self.received_at < cutoff

    def next_attempt(self, owner: str, lease_seconds: float, now: float) -> int:
        """A take-over, or a queued event's take: ``processing`` at attempt + 1, leased, with
        the previous attempt's result cleared."""
        self.state = EventState.PROCESSING
        self.attempt += 1
        self.lease_owner, self.lease_until = owner, now + float(lease_seconds)
        self.updated_at = now
        self.outcome, self.response, self.latency_ms = None, None, None
        return self.attempt

    def record(self, state: EventState, result: AttemptResult, now: float, *,
               error: str | None = None) -> Attempt:
        """An attempt's result written (a result write, a queued try's settle): the lease
        cleared. Answers the attempt as the timeline keeps it (its number and owner as the row
        held them before this write)."""
        tried = Attempt(
            attempt=self.attempt, started_at=now - float(result.latency_ms) / 1000.0,
            finished_at=now, owner=self.lease_owner, outcome=Outcome(result.outcome),
            status=result.response.status if result.response is not None else None,
            latency_ms=float(result.latency_ms), state=EventState(state), error=error)
        self.state = EventState(state)
        self.outcome = Outcome(result.outcome)
        self.response = result.response
        self.latency_ms = float(result.latency_ms)
        self.lease_owner, self.lease_until = None, None
        self.updated_at = now
        return tried


@dataclass(slots=True)
class Entry:
    """A queued event's queue entry (queue mode)."""

    seq: int
    due_at: float | None  # None: dead
    queued_at: float
    base_attempt: int = 0
    tries: int = 0
    order_key: str | None = None
    last_error: str | None = None


class Tables:
    """The rows, entries and nonces of one memory store, and the steps every verb shares."""

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._events: dict[Key, Event] = {}
        self._nonces: dict[Key, tuple[bytes, float]] = {}  # -> (hash, received_at)
        self._held: set[Key] = set()  # rows "another session" has locked
        self._queue: dict[Key, Entry] = {}
        self._attempts: dict[Key, list[Attempt]] = {}  # each event's timeline, oldest first
        self._notices: dict[tuple[str, str, str], float] = {}  # (target, kind, provider) -> sent
        self._seq = itertools.count(1)
        self._buckets: dict[str, tuple[float, float]] = {}  # provider -> (tokens, refilled at)
        self._permits: dict[tuple[str, int], tuple[str, float]] = {}  # -> (owner, lease until)
        self._wakers: list[Callable[[str], None]] = []
        self._closed = False
        self._provider_state_rows: dict[str, ProviderState] = {}

    async def _now(self, what: str) -> float:
        """The one await of every verb (a turn of the loop, standing for the round trip), then
        the clock. Raises ``StoreClosed`` (a ``StoreError``) once the store is closed."""
        await asyncio.sleep(0)
        if self._closed:
            raise StoreClosed(f"{what}: the memory store is closed")
        return float(self._clock())

    def _writable(self, what: str, key: Key) -> None:
        if key in self._held:
            raise RowLocked(f"{what}: the event row is locked by another session")

    def _read(self, event: Event, now: float) -> EventRow:
        """The row as the verbs answer it: with whether it has a queue entry."""
        return event.read(now, in_queue=(event.provider, event.event_id) in self._queue)

    def _pending(self, key: Key) -> bool:
        """The event has a queue entry that is not dead."""
        entry = self._queue.get(key)
        return entry is not None and entry.due_at is not None
