"""The ``Store`` verbs, written once for both SQL adapters.

Each verb builds the one mapping of named parameters its ``sql/<dialect>/<name>.sql`` file uses
(the two dialects' files name the same parameters), runs it, and decodes the rows with
:mod:`sidecar.store.rows`. An adapter subclasses :class:`SQLStore` and supplies only how to run
one statement on its connections (:meth:`SQLStore._rows`), its claim race
(:meth:`SQLStore._claim`) and ``close``; and may send concurrent result writes, and nonce binds,
together (:meth:`SQLStore._complete`, :meth:`SQLStore._bind_nonce`, see
:mod:`sidecar.store.coalesce`).

Its verb families by role live beside it: queue mode (:mod:`sidecar.store.queue_verbs`, whose
two-table writes each adapter supplies), the delivery limits (:mod:`sidecar.store.limit_verbs`)
and the providers' holds (:mod:`sidecar.store.provider_verbs`).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

from sidecar.core.errors import StoreError
from sidecar.core.events import (
    Attempt,
    AttemptResult,
    Claim,
    EventRow,
    EventState,
    Guard,
    NonceBinding,
    Replayed,
    StoredRequest,
)
from sidecar.core.listing import EventPage, EventQuery
from sidecar.core.notices import NoticeKind
from sidecar.store import migrations, rows
from sidecar.store.limit_verbs import LimitVerbs
from sidecar.store.owners import call_owner
from sidecar.store.provider_verbs import ProviderStateVerbs
from sidecar.store.queue_verbs import QueueVerbs
from sidecar.store.rows import (
    Params,
    Record,
    event_row,
    new_row_values,
    result_values,
    stored_request,
)


class SQLStore(QueueVerbs, LimitVerbs, ProviderStateVerbs, abc.ABC):
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
            **new_row_values(provider, event_id, body_sha256, payload),
            "lease_seconds": float(lease_seconds),
            "owner": call_owner(owner),
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
            **new_row_values(provider, event_id, body_sha256, payload),
            "lease_seconds": float(lease_seconds),
            "owner": call_owner(owner),
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
            "owner": call_owner(owner),
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
