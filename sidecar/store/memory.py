"""In-memory store: ``sidecar.core.ports.Store`` in a dict, for tests (ours and yours).

It passes the same contract suite as the PostgreSQL and SQLite adapters
(``tests/integration/test_store_contract.py``), so code tested against it meets the same
answers: one winner per claim, take-overs and results fenced by attempt, leases that expire by
the clock. It keeps nothing across processes or restarts: never a production store.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from sidecar.core.errors import RowLocked, StoreClosed
from sidecar.core.events import (
    AttemptResult,
    Claim,
    Enqueued,
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
)


@dataclass(slots=True)
class _Event:
    """One stored row (mutable: the store changes it in place)."""

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


@dataclass(slots=True)
class _Entry:
    """A queued event's queue entry (queue mode)."""

    seq: int
    due_at: float | None  # None: dead
    queued_at: float
    base_attempt: int = 0
    tries: int = 0
    order_key: str | None = None
    last_error: str | None = None


class MemoryStore:
    """``sidecar.core.ports.Store`` kept in this process's memory: pass it wherever a store is
    taken (the app's ``store=`` argument), or drive it directly.

    ``clock`` (seconds since the Unix epoch) is read once per call: it stamps rows, sets and
    expires leases, ages rows for ``list_events``/``purge``, and is the ``now`` of every
    ``EventRow`` read. Pass your own to move time by hand instead of waiting.

    Use it from one event loop. Each verb yields to the loop once, as a round trip to a database
    would (so that concurrent callers interleave), then acts without awaiting again: a verb is
    atomic, so of N concurrent claims of one key exactly one wins. It is not thread-safe.

    Example, a lease running out on a clock moved by hand::

        >>> import asyncio
        >>> from sidecar.store.memory import MemoryStore
        >>> now = [1_700_000_000.0]
        >>> store = MemoryStore(clock=lambda: now[0])
        >>> async def scenario():
        ...     first = await store.claim("stripe", "evt_1", b"sha", 30.0, "proxy-a")
        ...     early = await store.take_over("stripe", "evt_1", 30.0, "proxy-b")
        ...     now[0] += 30.0  # the lease ends
        ...     late = await store.take_over("stripe", "evt_1", 30.0, "proxy-b")
        ...     return first.won, early, late
        >>> asyncio.run(scenario())
        (True, None, 2)
    """

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._events: dict[tuple[str, str], _Event] = {}
        self._nonces: dict[tuple[str, str], tuple[bytes, float]] = {}  # -> (hash, received_at)
        self._held: set[tuple[str, str]] = set()  # rows "another session" has locked
        self._queue: dict[tuple[str, str], _Entry] = {}
        self._seq = itertools.count(1)
        self._wakers: list[Callable[[str], None]] = []
        self._closed = False

    def __repr__(self) -> str:
        return f"<MemoryStore events={len(self._events)} nonces={len(self._nonces)}>"

    async def _now(self, what: str) -> float:
        """The one await of every verb (a turn of the loop, standing for the round trip), then
        the clock. Raises ``StoreClosed`` (a ``StoreError``) once the store is closed."""
        await asyncio.sleep(0)
        if self._closed:
            raise StoreClosed(f"{what}: the memory store is closed")
        return float(self._clock())

    def _read(self, event: _Event, now: float) -> EventRow:
        return event.read(now, in_queue=(event.provider, event.event_id) in self._queue)

    @contextlib.asynccontextmanager
    async def hold_row(self, provider: str, event_id: str) -> AsyncIterator[None]:
        """For tests: while inside, the row counts as locked by another database session (an
        operator's ``SELECT … FOR UPDATE``): writes to it raise ``RowLocked`` at once, as the
        SQL stores do after their short row-lock wait; reads are unaffected."""
        key = (provider, event_id)
        self._held.add(key)
        try:
            yield
        finally:
            self._held.discard(key)

    def _writable(self, what: str, key: tuple[str, str]) -> None:
        if key in self._held:
            raise RowLocked(f"{what}: the event row is locked by another session")

    # -- the Store verbs: after `_now`, no await -------------------------------------------

    async def claim(
        self,
        provider: str,
        event_id: str,
        body_sha256: bytes,
        lease_seconds: float,
        owner: str,
        payload: StoredRequest | None = None,
    ) -> Claim:
        now = await self._now("claim")
        event = self._events.get((provider, event_id))
        if event is not None:
            return Claim(won=False, row=self._read(event, now))
        event = _Event(provider, event_id, bytes(body_sha256), received_at=now, payload=payload,
                       updated_at=now, lease_owner=owner, lease_until=now + float(lease_seconds))
        self._events[(provider, event_id)] = event
        return Claim(won=True, row=self._read(event, now))

    async def take_over(
        self, provider: str, event_id: str, lease_seconds: float, owner: str
    ) -> int | None:
        now = await self._now("take_over")
        self._writable("take_over", (provider, event_id))
        event = self._events.get((provider, event_id))
        if event is None or (provider, event_id) in self._queue or not (
            event.state is EventState.FAILED
            or (event.state is EventState.PROCESSING and event.lease_expired(now))
        ):
            return None
        event.state = EventState.PROCESSING
        event.attempt += 1
        event.lease_owner, event.lease_until = owner, now + float(lease_seconds)
        event.updated_at = now
        event.outcome, event.response, event.latency_ms = None, None, None
        return event.attempt

    async def complete(
        self, provider: str, event_id: str, attempt: int, result: AttemptResult
    ) -> bool:
        if result.state is EventState.PROCESSING:
            raise ValueError("an attempt's result must be DONE or FAILED, not PROCESSING")
        now = await self._now("complete")
        self._writable("complete", (provider, event_id))
        event = self._events.get((provider, event_id))
        if (event is None or event.state is not EventState.PROCESSING
                or event.attempt != attempt or (provider, event_id) in self._queue):
            return False
        event.state = EventState(result.state)
        event.outcome = Outcome(result.outcome)
        event.response = result.response
        event.latency_ms = float(result.latency_ms)
        event.lease_owner, event.lease_until = None, None
        event.updated_at = now
        return True

    async def get(self, provider: str, event_id: str) -> EventRow | None:
        now = await self._now("get")
        event = self._events.get((provider, event_id))
        return self._read(event, now) if event is not None else None

    async def list_events(
        self,
        provider: str | None = None,
        state: EventState | None = None,
        limit: int = 100,
        older_than_seconds: float | None = None,
    ) -> list[EventRow]:
        now = await self._now("list_events")
        wanted = EventState(state) if state is not None else None
        cutoff = now - float(older_than_seconds) if older_than_seconds is not None else None
        found = [
            e for e in self._events.values()
            if (provider is None or e.provider == provider)
            and (wanted is None or e.state is wanted)
            and (cutoff is None or e.received_before(cutoff))
        ]
        found.sort(key=lambda e: (-e.received_at, e.provider, e.event_id))
        return [self._read(e, now) for e in found[:max(limit, 0)]]

    async def get_payload(self, provider: str, event_id: str) -> StoredRequest | None:
        await self._now("get_payload")
        event = self._events.get((provider, event_id))
        return event.payload if event is not None else None

    async def stuck_counts(self) -> dict[str, int]:
        now = await self._now("stuck_counts")
        return dict(Counter(e.provider for e in self._events.values()
                            if e.stuck(now) and (e.provider, e.event_id) not in self._queue))

    async def release(self, provider: str, event_id: str, *, force: bool = False) -> bool:
        now = await self._now("release")
        self._writable("release", (provider, event_id))
        event = self._events.get((provider, event_id))
        if (event is None or event.state not in (EventState.PROCESSING, EventState.FAILED)
                or (provider, event_id) in self._queue):
            return False
        if event.state is EventState.PROCESSING and not force and not event.lease_expired(now):
            return False
        event.state = EventState.FAILED
        event.lease_owner, event.lease_until = None, None
        event.updated_at = now
        return True

    async def purge(self, provider: str, older_than_seconds: float, batch_size: int) -> int:
        now = await self._now("purge")
        cutoff = now - float(older_than_seconds)
        doomed = sorted(
            (e for e in self._events.values()
             if e.provider == provider and e.received_before(cutoff)
             and (e.state is not EventState.PROCESSING or e.lease_expired(now))
             and not self._pending((e.provider, e.event_id))),
            key=lambda e: e.received_at,
        )[:max(batch_size, 0)]
        for e in doomed:
            del self._events[(e.provider, e.event_id)]
            self._queue.pop((e.provider, e.event_id), None)
        return len(doomed)

    async def bind_nonce(self, provider: str, nonce: str, body_sha256: bytes) -> NonceBinding:
        now = await self._now("bind_nonce")
        bound, received_at = self._nonces.setdefault((provider, nonce),
                                                     (bytes(body_sha256), now))
        return NonceBinding(bound, received_at, now)

    async def purge_nonces(self, provider: str, older_than_seconds: float,
                           batch_size: int) -> int:
        now = await self._now("purge_nonces")
        cutoff = now - float(older_than_seconds)
        doomed = sorted(
            (key for key, (_, received_at) in self._nonces.items()
             if key[0] == provider and received_at < cutoff),
            key=lambda key: self._nonces[key][1],
        )[:max(batch_size, 0)]
        for key in doomed:
            del self._nonces[key]
        return len(doomed)

    # -- queue mode ------------------------------------------------------------------------

    def _pending(self, key: tuple[str, str]) -> bool:
        entry = self._queue.get(key)
        return entry is not None and entry.due_at is not None

    def _wake(self, provider: str) -> None:
        for wake in list(self._wakers):
            wake(provider)

    async def enqueue(
        self,
        provider: str,
        event_id: str,
        body_sha256: bytes,
        request: StoredRequest,
        *,
        order_key: str | None = None,
        max_depth: int | None = None,
    ) -> Enqueued:
        now = await self._now("enqueue")
        key = (provider, event_id)
        event = self._events.get(key)
        if event is not None:
            return Enqueued(accepted=False, row=self._read(event, now))
        if max_depth is not None and sum(
                1 for k in self._queue if k[0] == provider and self._pending(k)) >= max_depth:
            return Enqueued(accepted=False, row=None, full=True)
        self._events[key] = _Event(provider, event_id, bytes(body_sha256), received_at=now,
                                   payload=request, state=EventState.QUEUED, attempt=0,
                                   updated_at=now)
        self._queue[key] = _Entry(next(self._seq), due_at=now, queued_at=now,
                                  order_key=order_key)
        self._wake(provider)
        return Enqueued(accepted=True, row=None)

    def _blocked(self, key: tuple[str, str], entry: _Entry, now: float) -> bool:
        """An earlier entry with the same order key is waiting or in flight, or any other
        entry with the key is in flight under a live lease (a re-driven dead event keeps its
        early place, so it must not overtake one being delivered)."""
        if entry.order_key is None:
            return False
        for k, other in self._queue.items():
            if k == key or k[0] != key[0] or other.order_key != entry.order_key:
                continue
            if other.seq < entry.seq and other.due_at is not None:
                return True
            event = self._events[k]
            if event.state is EventState.PROCESSING and not event.lease_expired(now):
                return True
        return False

    async def take_queued(self, provider: str, limit: int, lease_seconds: float,
                          owner: str, *, ordered: bool = False) -> list[QueuedWork]:
        now = await self._now("take_queued")
        due = sorted(
            ((k, e) for k, e in self._queue.items()
             if k[0] == provider and e.due_at is not None and e.due_at <= now
             and k not in self._held and not self._blocked(k, e, now)),
            key=lambda item: (item[1].due_at or 0.0, item[1].seq))[:max(limit, 0)]
        taken: list[QueuedWork] = []
        for key, entry in due:
            event = self._events[key]
            if event.state not in (EventState.QUEUED, EventState.PROCESSING):
                continue
            entry.tries += 1
            entry.due_at = now + float(lease_seconds)
            event.state = EventState.PROCESSING
            event.attempt += 1
            event.lease_owner, event.lease_until = owner, now + float(lease_seconds)
            event.updated_at = now
            event.outcome, event.response, event.latency_ms = None, None, None
            assert event.payload is not None
            taken.append(QueuedWork(provider, key[1], event.attempt, entry.tries,
                                    event.attempt - entry.base_attempt, entry.queued_at, now,
                                    event.payload))
        return taken

    async def settle_queued(self, provider: str, event_id: str, tries: int,
                            settlement: Settlement) -> bool:
        if settlement.state not in (EventState.DONE, EventState.QUEUED, EventState.DEAD):
            raise ValueError("a settlement is DONE, QUEUED or DEAD")
        now = await self._now("settle_queued")
        key = (provider, event_id)
        self._writable("settle_queued", key)
        event, entry = self._events.get(key), self._queue.get(key)
        if (event is None or entry is None or entry.tries != tries
                or event.state is not EventState.PROCESSING):
            return False
        result = settlement.result
        event.state = EventState(settlement.state)
        event.outcome = Outcome(result.outcome)
        event.response = result.response
        event.latency_ms = float(result.latency_ms)
        event.lease_owner, event.lease_until = None, None
        event.updated_at = now
        if not settlement.reached:
            event.attempt -= 1
        if settlement.state is EventState.DONE:
            del self._queue[key]
            return True
        entry.last_error = settlement.error
        entry.due_at = (now + float(settlement.retry_in or 0.0)
                        if settlement.state is EventState.QUEUED else None)
        return True

    async def requeue_dead(self, provider: str, event_id: str | None = None, *,
                           older_than_seconds: float | None = None,
                           limit: int = 1000) -> list[str]:
        now = await self._now("requeue_dead")
        cutoff = now - float(older_than_seconds) if older_than_seconds is not None else None
        dead = sorted(
            ((k, e) for k, e in self._queue.items()
             if k[0] == provider and e.due_at is None
             and (event_id is None or k[1] == event_id)
             and (cutoff is None or self._events[k].received_before(cutoff))),
            key=lambda item: item[1].seq)[:max(limit, 0)]
        for key, entry in dead:
            event = self._events[key]
            event.state = EventState.QUEUED
            event.updated_at = now
            entry.due_at, entry.queued_at, entry.base_attempt = now, now, event.attempt
        if dead:
            self._wake(provider)
        return [key[1] for key, _ in dead]

    async def queue_entry(self, provider: str, event_id: str) -> QueueEntry | None:
        now = await self._now("queue_entry")
        entry = self._queue.get((provider, event_id))
        if entry is None:
            return None
        return QueueEntry(provider, event_id, entry.due_at, entry.tries, entry.queued_at,
                          entry.order_key, entry.last_error, now)

    async def queue_stats(self) -> dict[str, QueueStats]:
        now = await self._now("queue_stats")
        stats: dict[str, QueueStats] = {}
        for (provider, _), entry in self._queue.items():
            old = stats.get(provider, QueueStats(0, 0, 0.0))
            if entry.due_at is None:
                stats[provider] = QueueStats(old.pending, old.dead + 1,
                                             old.oldest_pending_seconds)
            else:
                stats[provider] = QueueStats(old.pending + 1, old.dead, max(
                    old.oldest_pending_seconds, now - entry.queued_at))
        return stats

    async def listen_queue(self, wake: Callable[[str], None]) -> None:
        """Wakes for this store's own enqueues and re-drives (one process: what another
        instance sharing it would see)."""
        self._wakers.append(wake)
        try:
            await asyncio.Event().wait()
        finally:
            self._wakers.remove(wake)

    async def ping(self) -> None:
        await self._now("ping")

    async def close(self) -> None:
        self._closed = True
