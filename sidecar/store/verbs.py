"""The ``Store`` verbs, written once for both SQL adapters.

Each verb builds the one mapping of named parameters its ``sql/<dialect>/<name>.sql`` file uses
(the two dialects' files name the same parameters), runs it, and decodes the rows with
:mod:`sidecar.store.rows`. An adapter subclasses :class:`SQLStore` and supplies only how to run
one statement on its connections (:meth:`SQLStore._rows`), its claim race
(:meth:`SQLStore._claim`) and ``close``; and may send concurrent result writes, and nonce binds,
together (:meth:`SQLStore._complete`, :meth:`SQLStore._bind_nonce`, see
:mod:`sidecar.store.coalesce`).

Queue mode writes two tables at once (the event row and its queue entry): PostgreSQL in one
statement (a data-modifying ``WITH``), SQLite in a few statements inside one write transaction.
So the adapter supplies those verbs' writes too (:meth:`SQLStore._enqueue`,
:meth:`SQLStore._take_queued`, :meth:`SQLStore._settle_queued`, :meth:`SQLStore._requeue_dead`)
and, where its database has notifications, :meth:`SQLStore.listen_queue`.
"""

from __future__ import annotations

import abc
import asyncio
import itertools
import json
import secrets
from collections.abc import Callable, Sequence

from sidecar.core.errors import StoreError
from sidecar.core.events import (
    Attempt,
    AttemptResult,
    Claim,
    Enqueued,
    EventRow,
    EventState,
    Guard,
    NonceBinding,
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
from sidecar.store import migrations, rows
from sidecar.store.provider_verbs import ProviderStateVerbs
from sidecar.store.rows import Params, Record, event_row, result_values, stored_request


class SQLStore(ProviderStateVerbs, abc.ABC):
    """``sidecar.core.ports.Store`` over named SQL statements."""

    # -- what an adapter supplies -----------------------------------------------------------

    @abc.abstractmethod
    async def _rows(self, name: str, params: Params) -> Sequence[Record]:
        """Run ``sql/<dialect>/<name>.sql`` with ``params`` as one committed statement and
        return its rows. Raises ``StoreError`` (from the driver's error) on any failure."""

    @abc.abstractmethod
    async def _claim(self, params: Params) -> Claim | Replayed:
        """``claim.sql`` (inserting a row or finding the existing one, with ``get.sql`` where
        needed), settled against the races of the adapter's database. With a guard
        (``guard_key`` not NULL), the guard bound first in the same atomic write, and the
        claim made only if it is bound to ``guard_digest`` (else ``Replayed``)."""

    @abc.abstractmethod
    async def close(self) -> None: ...

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

    async def _complete(self, params: Params) -> Sequence[Record]:
        """``complete.sql``: the row written (the attempt), or none when superseded. An adapter
        may send concurrent calls together, each answered as if it had run alone."""
        return await self._rows("complete", params)

    async def _bind_nonce(self, params: Params) -> Sequence[Record]:
        """``bind_nonce.sql``: the binding (``binding.fragment.sql``), or no row when the
        nonce is bound already by an insert the statement did not see (then ``get_nonce.sql``
        reads it). An adapter may send concurrent calls together, each answered as if it had
        run alone."""
        return await self._rows("bind_nonce", params)

    # -- the Store verbs -------------------------------------------------------------------

    async def claim(self, provider: str, event_id: str, body_sha256: bytes,
                    lease_seconds: float, owner: str,
                    payload: StoredRequest | None = None) -> Claim:
        claim = await self._claim({
            **_new_row(provider, event_id, body_sha256, payload),
            "lease_seconds": float(lease_seconds),
            "owner": _call_owner(owner),
            "guard_key": None,
            "guard_digest": None,
        })
        if not isinstance(claim, Claim):  # only a guard can refuse a claim
            raise StoreError(f"claim of {provider}:{event_id} answered {claim!r} unguarded")
        return claim

    async def claim_guarded(self, provider: str, event_id: str, body_sha256: bytes,
                            lease_seconds: float, owner: str, guard: Guard,
                            payload: StoredRequest | None = None) -> Claim | Replayed:
        return await self._claim({
            **_new_row(provider, event_id, body_sha256, payload),
            "lease_seconds": float(lease_seconds),
            "owner": _call_owner(owner),
            "guard_key": guard.key,
            "guard_digest": guard.digest,
        })

    async def take_over(
        self, provider: str, event_id: str, lease_seconds: float, owner: str
    ) -> int | None:
        rows = await self._rows("take_over", {
            "provider": provider,
            "event_id": event_id,
            "lease_seconds": float(lease_seconds),
            "owner": _call_owner(owner),
        })
        return int(rows[0]["attempt"]) if rows else None

    async def complete(
        self, provider: str, event_id: str, attempt: int, result: AttemptResult
    ) -> bool:
        params = {"provider": provider, "event_id": event_id, "attempt": attempt,
                  **result_values(result)}
        return bool(await self._complete(params))

    async def get(self, provider: str, event_id: str) -> EventRow | None:
        rows = await self._rows("get", {"provider": provider, "event_id": event_id})
        return event_row(rows[0]) if rows else None

    async def list_events(self, provider: str | None = None, state: EventState | None = None,
                          limit: int = 100, older_than_seconds: float | None = None,
                          ) -> list[EventRow]:
        rows = await self._rows("list_events", {
            "provider": provider,
            "state": EventState(state).value if state is not None else None,
            "limit": limit,
            "older_than": float(older_than_seconds) if older_than_seconds is not None else None,
        })
        return [event_row(r) for r in rows]

    async def attempts(self, provider: str, event_id: str) -> list[Attempt]:
        records = await self._rows("attempts", {"provider": provider, "event_id": event_id})
        return [rows.attempt(r) for r in records]

    async def list_page(self, query: EventQuery) -> EventPage:
        # Queued and dead events are all in the (small) queue table: read them from there.
        queued = query.state in (EventState.QUEUED, EventState.DEAD)
        records = await self._rows("list_page_queue" if queued else "list_page",
                                   rows.page_params(query))
        return rows.event_page(records, query.limit)

    async def get_payload(self, provider: str, event_id: str) -> StoredRequest | None:
        rows = await self._rows("get_payload", {"provider": provider, "event_id": event_id})
        return stored_request(rows[0]) if rows else None

    async def stuck_counts(self) -> dict[str, int]:
        return {str(r["provider"]): int(r["stuck"]) for r in await self._rows("stuck_counts", {})}

    async def release(self, provider: str, event_id: str, *, force: bool = False) -> bool:
        return bool(await self._rows("release", {"provider": provider, "event_id": event_id,
                                                 "force": bool(force)}))

    async def purge(self, provider: str, older_than_seconds: float, batch_size: int) -> int:
        return await self._purge("purge", provider, older_than_seconds, batch_size)

    async def bind_nonce(self, provider: str, nonce: str, body_sha256: bytes) -> NonceBinding:
        params = {"provider": provider, "nonce": nonce, "body_sha256": body_sha256}
        for _ in range(3):
            # No row from bind_nonce.sql: the nonce was bound already, by an insert its snapshot
            # did not see (PostgreSQL) or at all (SQLite's INSERT answers only what it inserted).
            found = await self._bind_nonce(params) or await self._rows("get_nonce", params)
            if found:
                return rows.nonce_binding(found[0])
            # Purged between the two statements: bind it again.
        raise StoreError(f"nonce of {provider} did not settle after 3 tries")

    async def purge_nonces(self, provider: str, older_than_seconds: float,
                           batch_size: int) -> int:
        return await self._purge("purge_nonces", provider, older_than_seconds, batch_size)

    # -- delivery limits (core.ports.LimitStore) -------------------------------------------

    async def take_tokens(self, provider: str, want: int, limit: RateLimit) -> Tokens:
        if want <= 0:
            raise ValueError(f"take_tokens of {provider}: want must be > 0, got {want}")
        [record] = await self._rows("take_tokens", {
            "provider": provider, "want": int(want), "burst": int(limit.burst),
            "per_second": float(limit.per_second)})
        return Tokens(int(record["taken"]), float(record["tokens"]))

    async def return_tokens(self, provider: str, count: int, limit: RateLimit) -> None:
        if count > 0:
            await self._rows("return_tokens", {"provider": provider, "count": int(count),
                                               "burst": int(limit.burst)})

    async def take_permits(self, provider: str, want: int, concurrency: int,
                           lease_seconds: float, owner: str) -> list[Permit]:
        if want <= 0:
            return []
        token = _call_owner(owner)
        records = await self._rows("take_permits", {
            "provider": provider, "want": int(want), "concurrency": int(concurrency),
            "lease_seconds": float(lease_seconds), "owner": token})
        return [Permit(provider, int(r["slot"]), token) for r in records]

    async def release_permits(self, permits: Sequence[Permit]) -> int:
        freed = 0
        by_holder: dict[tuple[str, str], list[int]] = {}
        for permit in permits:
            by_holder.setdefault((permit.provider, permit.owner), []).append(permit.slot)
        for (provider, owner), slots in by_holder.items():
            freed += len(await self._rows("release_permits", {
                "provider": provider, "owner": owner, "slots": json.dumps(sorted(slots))}))
        return freed

    # -- queue mode ------------------------------------------------------------------------

    async def enqueue(self, provider: str, event_id: str, body_sha256: bytes,
                      request: StoredRequest, *, order_key: str | None = None,
                      max_depth: int | None = None) -> Enqueued:
        return await self._enqueue({
            **_new_row(provider, event_id, body_sha256, request),
            "order_key": order_key,
            "max_depth": int(max_depth) if max_depth is not None else None,
            "owner": _call_owner("enqueue"),
        })

    async def take_queued(self, provider: str, limit: int, lease_seconds: float,
                          owner: str, *, ordered: bool = False) -> list[QueuedWork]:
        if limit <= 0:  # SQLite reads a negative LIMIT as none at all
            return []
        records = await self._take_queued({
            "provider": provider,
            "limit": int(limit),
            "lease_seconds": float(lease_seconds),
            "owner": _call_owner(owner),
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

    async def ping(self) -> None:
        await self._rows("ping", {})

    async def claim_notice(self, target: str, kind: NoticeKind, provider: str,
                           interval_seconds: float) -> bool:
        return bool(await self._rows("claim_notice", {
            "target": target, "kind": NoticeKind(kind).value, "provider": provider,
            "interval_s": float(interval_seconds)}))

    async def applied_migrations(self) -> set[str]:
        """Names of the migrations recorded in the database (empty for a fresh database)."""
        return await migrations.recorded(self._rows)

    async def _purge(self, name: str, provider: str, older_than_seconds: float,
                     batch_size: int) -> int:
        rows = await self._rows(name, {"provider": provider,
                                       "older_than": float(older_than_seconds),
                                       "batch_size": batch_size})
        # Each row counts the rows it stands for: PostgreSQL answers one row with the total,
        # SQLite one row per deleted row (its DELETE cannot sit in a query that counts it).
        return sum(int(r["deleted"]) for r in rows)


def _new_row(provider: str, event_id: str, body_sha256: bytes,
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


# Call tokens: random per process, counted per call (no system call on the hot path).
_PROCESS_TOKEN = secrets.token_hex(4)
_calls = itertools.count(1)


def _call_owner(owner: str) -> str:
    """The lease owner written by one ``claim``, ``take_over``, ``enqueue`` or ``take_queued``
    call: the process's owner id and a token of the call. An adapter that repeats a call whose
    connection failed finds the first run's rows by it (``sql/postgres/claim_landed.sql``,
    ``take_over_landed.sql``, ``enqueue_landed.sql``, ``take_queued_landed.sql``)."""
    return f"{owner}#{_PROCESS_TOKEN}.{next(_calls)}"
