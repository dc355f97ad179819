"""Queue mode's verbs (``core.ports.QueueWorkerStore`` and the queue's part of the operator's),
written once for both SQL adapters. Queue mode writes two tables at once (the event row and its
queue entry), so each adapter supplies those writes (the abstract methods here)."""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Callable, Sequence

from sidecar.core.events import (
    Enqueued,
    QueuedWork,
    QueueEntry,
    QueueStats,
    Settlement,
    StoredRequest,
)
from sidecar.store import rows
from sidecar.store.owners import call_owner
from sidecar.store.rows import Params, Record, new_row_values


class QueueVerbs(abc.ABC):
    @abc.abstractmethod
    async def _rows(self, name: str, params: Params) -> Sequence[Record]: ...

    @abc.abstractmethod
    async def _enqueue(self, params: Params) -> Enqueued:
        """Queue mode's claim: the row and its queue entry inserted together, or the existing
        row, or ``full`` (nothing written), settled against the races of the database."""

    @abc.abstractmethod
    async def _take_queued(self, params: Params, *, ordered: bool = False) -> Sequence[Record]:
        """The take, committed at once: one record per entry taken (``take_queued`` columns),
        due first, then in order of acceptance. ``ordered``: the provider has an order key, so
        its takes must not run together (each must see the previous one's commit)."""

    @abc.abstractmethod
    async def _settle_queued(self, params: Params) -> Sequence[Record]:
        """The fenced settle of one take, committed at once: the row's attempt, or no record
        when the take was superseded."""

    @abc.abstractmethod
    async def _requeue_dead(self, params: Params) -> Sequence[Record]:
        """The re-drive, committed at once: one record per event re-queued (``event_id``), in
        order of acceptance."""


    async def enqueue(self, provider: str, event_id: str, body_sha256: bytes,
                      request: StoredRequest, *, order_key: str | None = None,
                      max_depth: int | None = None) -> Enqueued:
        return await self._enqueue({
            **new_row_values(provider, event_id, body_sha256, request),
            "order_key": order_key,
            "max_depth": int(max_depth) if max_depth is not None else None,
            "owner": call_owner("enqueue"),
        })

    async def take_queued(self, provider: str, limit: int, lease_seconds: float,
                          owner: str, *, ordered: bool = False) -> list[QueuedWork]:
        if limit <= 0:  # SQLite reads a negative LIMIT as none at all
            return []
        records = await self._take_queued({
            "provider": provider,
            "limit": int(limit),
            "lease_seconds": float(lease_seconds),
            "owner": call_owner(owner),
        }, ordered=ordered)
        return [rows.queued_work(r, provider) for r in records]

    async def settle_queued(self, provider: str, event_id: str, tries: int,
                            settlement: Settlement) -> bool:
        params = {"provider": provider, "event_id": event_id, "tries": int(tries),
                  **rows.settle_values(settlement)}
        return bool(await self._settle_queued(params))

    async def requeue_dead(self, provider: str, event_id: str | None = None, *,
                           older_than_seconds: float | None = None,
                           limit: int = 1000) -> list[str]:
        if limit <= 0:
            return []
        records = await self._requeue_dead({
            "provider": provider,
            "event_id": event_id,
            "older_than": float(older_than_seconds) if older_than_seconds is not None else None,
            "limit": int(limit),
        })
        return [str(r["event_id"]) for r in records]

    async def queue_entry(self, provider: str, event_id: str) -> QueueEntry | None:
        records = await self._rows("queue_entry", {"provider": provider, "event_id": event_id})
        return rows.queue_entry(records[0]) if records else None

    async def queue_stats(self) -> dict[str, QueueStats]:
        return {str(r["provider"]): rows.queue_stats(r)
                for r in await self._rows("queue_stats", {})}

    async def listen_queue(self, wake: Callable[[str], None]) -> None:
        """Without notifications (SQLite): wait until cancelled. Other processes' work is found
        by the workers' poll."""
        await asyncio.Event().wait()
