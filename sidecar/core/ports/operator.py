"""The operator's side's store roles: upkeep and partitions, the events CLI and admin API,
providers' holds and notifications (the table in ``sidecar.core.ports``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from sidecar.core.breaker import BreakerPolicy, ProbeEnd, ProviderState
from sidecar.core.events import (
    Attempt,
    EventRow,
    EventState,
    QueueEntry,
    QueueStats,
    StoredRequest,
)
from sidecar.core.listing import EventPage, EventQuery
from sidecar.core.notices import NoticeKind
from sidecar.core.partition_retention import PartitionsMade, PartitionsRetired
from sidecar.core.ports.delivery import EventStore


class UpkeepStore(Protocol):
    """What the maintenance loop and the probes need: retention, the gauges' counts, a ping.
    Each scans or deletes in bounded batches; never on the request path."""

    async def purge(self, provider: str, older_than_seconds: float, batch_size: int) -> int:
        """Delete up to ``batch_size`` rows of ``provider`` received more than
        ``older_than_seconds`` ago, never a ``processing`` row with a live lease."""
        ...

    async def purge_nonces(self, provider: str, older_than_seconds: float,
                           batch_size: int) -> int:
        """Delete up to ``batch_size`` nonces of ``provider`` older than the given age."""
        ...

    async def stuck_counts(self) -> dict[str, int]:
        """Per provider, rows in ``processing`` whose lease has expired. Scans the table: for
        the maintenance loop, never the request path."""
        ...

    async def queue_stats(self) -> dict[str, QueueStats]:
        """Per provider with entries: waiting/in-flight and dead counts, oldest waiting age.
        For the metrics refresh, never the request path."""
        ...

    async def ping(self) -> None:
        """Raise ``StoreError`` unless the database answers."""
        ...


class PartitionUpkeep(Protocol):
    """A partitioned store's partitions (PostgreSQL, ``store.partitioning``), kept by the
    maintenance loop: never on the request path, every lock wait bounded short."""

    async def make_ahead(self) -> PartitionsMade:
        """Make the partitions the configured number of intervals ahead; how many were made,
        and the tables left for the next round because they stayed busy (locked)."""
        ...

    async def retire(self, retention: Mapping[str, float]) -> PartitionsRetired:
        """Drop the partitions whose rows are all past their provider's ``retention``
        (seconds, by provider key), never one holding a live lease or a waiting queue
        entry, nor rows of a provider missing from ``retention``; with each table's extent
        after the drops (``PartitionsRetired.extent``)."""
        ...


class OperatorStore(EventStore, Protocol):
    """What the operator's verbs (``events`` CLI, admin API) need besides an event's attempts:
    list, read the attempts timeline, the stored request and the queue entry, release,
    re-drive dead events."""

    async def queue_entry(self, provider: str, event_id: str) -> QueueEntry | None:
        """The event's queue entry, or None (not queued, or done): where an event of
        ``EventRow.in_queue`` stands in its provider's queue."""
        ...

    async def attempts(self, provider: str, event_id: str) -> list[Attempt]:
        """Every recorded attempt of the event, oldest first (empty: none recorded).

        An attempt is recorded by the write of its result (``complete``, ``settle_queued``),
        atomically with it: a superseded write records nothing, and a write repeated after a
        lost connection records it once. Retention deletes an event's attempts with it."""
        ...

    async def list_events(
        self,
        provider: str | None = None,
        state: EventState | None = None,
        limit: int = 100,
        older_than_seconds: float | None = None,
    ) -> list[EventRow]:
        """Rows newest first, optionally filtered by provider, state and minimum age."""
        ...

    async def list_page(self, query: EventQuery) -> EventPage:
        """One page of rows newest first, from an index (no OFFSET, no sort of the table).

        Order: (received_at DESC, provider, event_id), exact to the microsecond; the page holds
        the first ``query.limit`` rows strictly after ``query.after`` that pass every filter,
        and ``next`` is its last row's key when older rows pass too. Each provider's
        ``(provider, received_at)`` index is walked back from the cursor, the filters applied
        along the walk: a filter that few rows pass walks further (state ``queued``/``dead``
        read the provider's queue entries instead)."""
        ...

    async def get_payload(self, provider: str, event_id: str) -> StoredRequest | None:
        """The stored first request of an event, or None (no row, or payloads not kept)."""
        ...

    async def release(self, provider: str, event_id: str, *, force: bool = False) -> bool:
        """Operator repair: mark a ``failed`` row, or a ``processing`` row whose lease has
        expired, ``failed`` with its lease cleared, so that the next redelivery takes it over.
        A ``processing`` row with a live lease is released only with ``force`` (its attempt may
        still be running: a redelivery would then reach the app concurrently). The lease is
        checked in the same atomic step as the update. Returns False if no row qualified."""
        ...

    async def requeue_dead(self, provider: str, event_id: str | None = None, *,
                           older_than_seconds: float | None = None,
                           limit: int = 1000) -> list[str]:
        """Re-drive dead events: back to ``queued``, due now, with a fresh budget (attempts and
        ``max_age`` count again from here; the attempt number goes on). One event, or up to
        ``limit`` dead ones of ``provider`` received more than ``older_than_seconds`` ago.
        Returns the event ids re-queued (wakes the workers, as ``enqueue``)."""
        ...


class ProviderStateStore(Protocol):
    """Each provider's hold state (``core.breaker.ProviderState``): paused by an operator, and
    its circuit breaker. Every change is one guarded statement: of concurrent callers in any
    process, exactly one makes it, and only that call gets the new state back (None: the guard
    refused, nothing written). Times are the database clock's."""

    async def provider_states(self) -> list[ProviderState]:
        """Every provider that has a row (one never paused nor failing has none), by name."""
        ...

    async def pause_provider(self, provider: str, by: str, reason: str) -> ProviderState | None:
        """Pause, unless paused already (the first pause stands: None)."""
        ...

    async def resume_provider(self, provider: str) -> ProviderState | None:
        """Resume, if paused (else None)."""
        ...

    async def breaker_failure(self, provider: str, policy: BreakerPolicy,
                              why: str) -> ProviderState | None:
        """Count a failed attempt while the breaker is closed (``core.breaker.count_failure``);
        the state returned is OPEN exactly when this call opened it. None: not closed."""
        ...

    async def take_probe(self, provider: str, owner: str,
                         lease_seconds: float) -> ProviderState | None:
        """Take the one probe (``core.breaker.take_probe``) for ``owner``, leased; None: not
        due, or another caller has it."""
        ...

    async def end_probe(self, provider: str, owner: str, end: ProbeEnd, cooldown: float,
                        why: str) -> ProviderState | None:
        """End ``owner``'s probe (``core.breaker.end_probe``); None: it holds none."""
        ...


class AdminStore(OperatorStore, UpkeepStore, Protocol):
    """What the admin API needs: the operator's verbs, and a ping for readiness."""


class NoticeStore(Protocol):
    """What the notifier needs: one message per condition and interval across every process
    sharing the store. Never on the delivery path."""

    async def claim_notice(self, target: str, kind: NoticeKind, provider: str,
                           interval_seconds: float) -> bool:
        """Claim the right to send one message of ``kind`` about ``provider`` to ``target``
        (an opaque id of the target): True if none was claimed within the last
        ``interval_seconds`` (database clock), and the claim is recorded as now. One guarded
        statement: of concurrent claims of one key from any number of processes, at most one
        is True."""
        ...
