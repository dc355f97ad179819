"""Queue mode's verbs of the memory store: a queued event is a row plus an ``Entry``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from sidecar.core.events import (
    Enqueued,
    EventState,
    QueuedWork,
    QueueEntry,
    QueueStats,
    Settlement,
    StoredRequest,
)
from sidecar.store.memory.tables import Entry, Event, Key, Tables


class QueueVerbs(Tables):
    """The queue-mode verbs of ``sidecar.core.ports.Store``. After ``_now``, no await."""

    async def enqueue(self, provider: str, event_id: str, body_sha256: bytes,
                      request: StoredRequest, *, order_key: str | None = None,
                      max_depth: int | None = None) -> Enqueued:
        now = await self._now("enqueue")
        key = (provider, event_id)
        event = self._events.get(key)
        if event is not None:
            return Enqueued(accepted=False, row=self._read(event, now))
        if max_depth is not None and sum(
                1 for k in self._queue if k[0] == provider and self._pending(k)) >= max_depth:
            return Enqueued(accepted=False, row=None, full=True)
        self._events[key] = Event(provider, event_id, bytes(body_sha256), received_at=now,
                                  payload=request, state=EventState.QUEUED, attempt=0,
                                  updated_at=now)
        self._queue[key] = Entry(next(self._seq), due_at=now, queued_at=now,
                                 order_key=order_key)
        self._wake(provider)
        return Enqueued(accepted=True, row=None)

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
            attempt = event.next_attempt(owner, lease_seconds, now)
            assert event.payload is not None
            taken.append(QueuedWork(provider, key[1], attempt, entry.tries,
                                    attempt - entry.base_attempt, entry.queued_at, now,
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
        self._attempts.setdefault(key, []).append(
            event.record(settlement.state, settlement.result, now, error=settlement.error))
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

    def _wake(self, provider: str) -> None:
        for wake in list(self._wakers):
            wake(provider)

    def _blocked(self, key: Key, entry: Entry, now: float) -> bool:
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
