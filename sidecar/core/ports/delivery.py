"""The delivery side's store roles: reading a row, the result write, claims, the rate and
concurrency limits, and queue mode's workers (the table in ``sidecar.core.ports``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from sidecar.core.events import (
    AttemptResult,
    Claim,
    Enqueued,
    EventRow,
    Guard,
    NonceBinding,
    QueuedWork,
    Replayed,
    Settlement,
    StoredRequest,
)
from sidecar.core.limits import Permit, RateLimit, Tokens


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
