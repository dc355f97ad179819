"""The store port: the few verbs the proxy needs, implemented once per database.

Each caller is typed by the role it plays, and sees only that role's verbs:

    RowReader         get                                       whether a lost write landed
    EventStore        + take_over, complete                     the forwarder's result write
    DeliveryStore     + claim, claim_guarded, enqueue,          the delivery pipeline
                        bind_nonce
    OperatorStore     + list_page, attempts, release, …         the events CLI and admin API
    QueueWorkerStore  get, take_queued, settle_queued, …        queue mode's delivery workers
    LimitStore        take_tokens, take_permits, …              delivery.rate / concurrency
    UpkeepStore       purge, purge_nonces, stuck_counts, …      maintenance, probes, gauges
    ProviderStateStore  provider_states, pause_provider, …      holds: pause and the breaker
    AdminStore        OperatorStore + UpkeepStore               the admin API (verbs, readiness)
    NoticeStore       claim_notice                              notifications, once per interval
    Store             all of them, and close                    the adapters, the composition
                                                                root and the contract suites
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from sidecar.core.breaker import BreakerPolicy, ProbeEnd, ProviderState
from sidecar.core.events import (
    Attempt,
    AttemptResult,
    Claim,
    Enqueued,
    EventRow,
    EventState,
    Guard,
    NonceBinding,
    PartitionsMade,
    PartitionsRetired,
    QueuedWork,
    QueueEntry,
    QueueStats,
    Replayed,
    Settlement,
    StoredRequest,
)
from sidecar.core.limits import Permit, RateLimit, Tokens
from sidecar.core.listing import EventPage, EventQuery
from sidecar.core.notices import NoticeKind


class RowReader(Protocol):
    """Read one event's row: how a result write that lost its connection tells whether it
    landed."""

    async def get(self, provider: str, event_id: str) -> EventRow | None:
        """Read one row (with the database clock)."""
        ...


class EventStore(RowReader, Protocol):
    """The verbs on one event's attempts, whoever holds it: read its row, take a failed or
    abandoned attempt over, record an attempt's result (the forwarder's write)."""

    async def take_over(
        self, provider: str, event_id: str, lease_seconds: float, owner: str
    ) -> int | None:
        """If the row is ``failed``, or ``processing`` with an expired lease, atomically move it to
        ``processing`` with attempt + 1 and a new lease; return the new attempt. Else ``None``."""
        ...

    async def complete(
        self, provider: str, event_id: str, attempt: int, result: AttemptResult
    ) -> bool:
        """Record the result of ``attempt`` if the row is still ``processing`` at that attempt.
        Clears the lease. Returns False when the attempt was superseded (nothing written)."""
        ...


class LimitStore(Protocol):
    """A provider's delivery limits, kept in the store so that every process and replica
    sharing it obeys one bucket and one set of permits (``delivery.rate``, ``delivery.burst``,
    ``delivery.concurrency``). Each verb is one committed statement, clocked by the database."""

    async def take_tokens(self, provider: str, want: int, limit: RateLimit) -> Tokens:
        """Refill ``provider``'s bucket for the time since it was last refilled (database
        clock; a new bucket starts full at ``limit.burst``), then take up to ``want`` whole
        tokens, atomically across processes: concurrent takers never get more tokens between
        them than the bucket held. Answers how many were granted and what is left."""
        ...

    async def return_tokens(self, provider: str, count: int, limit: RateLimit) -> None:
        """Put back ``count`` tokens taken but not spent (never above ``limit.burst``)."""
        ...

    async def take_permits(self, provider: str, want: int, concurrency: int,
                           lease_seconds: float, owner: str) -> list[Permit]:
        """Take up to ``want`` of ``provider``'s ``concurrency`` slots, each leased for
        ``lease_seconds`` (database clock) to a token of this call. Only live leases count: a
        slot whose lease ended (its holder crashed) is free. Atomic across processes: a slot
        is held by at most one live lease, so never more than ``concurrency`` permits are live.
        May answer fewer than are free when another taker competes for the same slots."""
        ...

    async def release_permits(self, permits: Sequence[Permit]) -> int:
        """Free ``permits`` (all of one provider), each only while still held by its owner
        (a permit whose lease ended and was taken by another is left alone); how many."""
        ...


class DeliveryStore(EventStore, LimitStore, Protocol):
    """What the delivery pipeline needs: claim an event id (forward mode) or queue it (queue
    mode), and bind the replay guard's nonces."""

    async def claim(
        self,
        provider: str,
        event_id: str,
        body_sha256: bytes,
        lease_seconds: float,
        owner: str,
        payload: StoredRequest | None = None,
    ) -> Claim:
        """Insert a ``processing`` row with attempt 1 and a lease, or return the existing row.

        One committed statement; no transaction is left open. ``payload``, when given, is kept
        on the new row (for re-driving) and never changed afterwards.
        """
        ...

    async def claim_guarded(
        self,
        provider: str,
        event_id: str,
        body_sha256: bytes,
        lease_seconds: float,
        owner: str,
        guard: Guard,
        payload: StoredRequest | None = None,
    ) -> Claim | Replayed:
        """``bind_nonce(provider, guard.key, guard.digest)`` and then ``claim``, as one atomic
        write: one committed statement (PostgreSQL), one transaction (SQLite). The guard is
        bound first, whatever the claim then finds. If it is bound to another digest the
        answer is ``Replayed`` and the claim is not made (no row inserted, none answered). Else the
        claim's answer, with the binding (``Claim.binding``, its digest the guard's).

        Atomic across processes like both verbs: of concurrent guarded claims offering one
        key different digests, exactly one binds; the others are ``Replayed`` and write
        nothing."""
        ...

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
        """Queue mode's claim, one committed statement: insert a ``queued`` row (attempt 0)
        with ``request`` stored on it and its queue entry due now, or find the existing row.
        With ``max_depth``, a new event is refused (``full``, nothing written) while the
        provider has that many entries waiting or in flight. Wakes the provider's workers in
        every process (PostgreSQL: NOTIFY at commit)."""
        ...

    async def bind_nonce(self, provider: str, nonce: str, body_sha256: bytes) -> NonceBinding:
        """Bind a signature nonce to the body hash first seen with it (atomically, across
        processes) and return the binding: its hash (a different one means the signed nonce was
        replayed with another body), when it was first bound, and the database clock now. A
        later bind never moves ``received_at``: retention (``purge_nonces``) deletes the binding
        by it, so its age tells how long the binding is still kept."""
        ...


class QueueWorkerStore(RowReader, LimitStore, Protocol):
    """What a queue-mode delivery worker needs: take due entries, settle each take, and be
    woken when another process queues work.

    A queued event is an event row (state ``queued``, ``processing`` while a worker forwards
    it, then ``done`` or ``dead``) plus a queue entry: its due time, order key, the take
    counter that fences workers, and its place in the order of acceptance. Entries of
    ``done`` events are removed; ``dead`` ones stay (marked) until re-driven or until
    retention deletes the row. Retention never deletes a row whose entry is not dead.
    ``take_over``, ``release`` and ``complete`` never touch a row that has a queue entry.
    """

    async def take_queued(self, provider: str, limit: int, lease_seconds: float,
                          owner: str, *, ordered: bool = False) -> list[QueuedWork]:
        """Take up to ``limit`` due entries of ``provider`` for delivery, in one committed
        statement: due first, then in order of acceptance. Due: waiting with ``due_at`` passed,
        or in flight with an expired lease (a crashed worker's). An entry with an
        ``order_key`` is not due while an earlier-accepted entry with the same key is waiting
        or in flight. Each taken row goes to ``processing`` with attempt + 1 and a lease; its
        entry's take counter goes up (the fence) and it is due again when the lease ends.
        Concurrent takers (any process) never take the same entry: ``SKIP LOCKED``. With
        ``ordered`` (the provider has an order key) takes of the provider run one at a time,
        each seeing the previous one's commit, so a key's ordering check cannot be raced."""
        ...

    async def settle_queued(self, provider: str, event_id: str, tries: int,
                            settlement: Settlement) -> bool:
        """Write how the take ``tries`` ended, fenced: only if the entry's take counter is
        still ``tries`` and the row ``processing``; one committed statement. DONE removes the
        entry; QUEUED makes it due in ``retry_in`` seconds; DEAD marks it dead. Unless
        ``reached``, the row's attempt goes back down by one. Returns False when superseded."""
        ...

    async def listen_queue(self, wake: Callable[[str], None]) -> None:
        """Call ``wake(provider)`` whenever another process queues work, until cancelled.
        PostgreSQL: LISTEN on a dedicated connection (not from the pool), reconnecting after
        a failure (a missed notification is covered by the workers' poll). Stores without
        notifications wait until cancelled."""
        ...


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


class Store(DeliveryStore, QueueWorkerStore, AdminStore, ProviderStateStore, NoticeStore,
            Protocol):
    """Storage of event rows. Every method raises ``StoreError`` (never a driver error) when the
    database is unreachable or too slow.

    Invariants the adapters enforce in the database itself:
    - ``claim`` is atomic across processes: of N concurrent claims of one key exactly one wins.
    - ``take_over`` succeeds for exactly one caller per eligible row state.
    - ``complete`` is fenced by ``attempt``: a stale attempt never overwrites a newer one.

    Implementations live in ``sidecar.store`` (PostgreSQL, SQLite, and ``MemoryStore`` for
    tests); ``tests/integration/test_store_contract.py`` holds every one of them to this
    contract.
    """

    async def close(self) -> None: ...
