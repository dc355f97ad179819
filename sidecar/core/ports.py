"""The store port: the few verbs the proxy needs, implemented once per database."""

from __future__ import annotations

from typing import Protocol

from sidecar.core.events import AttemptResult, Claim, EventRow, EventState, StoredRequest


class Store(Protocol):
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

    async def get(self, provider: str, event_id: str) -> EventRow | None:
        """Read one row (with the database clock)."""
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

    async def get_payload(self, provider: str, event_id: str) -> StoredRequest | None:
        """The stored first request of an event, or None (no row, or payloads not kept)."""
        ...

    async def stuck_counts(self) -> dict[str, int]:
        """Per provider, rows in ``processing`` whose lease has expired. Scans the table: for
        the maintenance loop, never the request path."""
        ...

    async def release(self, provider: str, event_id: str, *, force: bool = False) -> bool:
        """Operator repair: mark a ``failed`` row, or a ``processing`` row whose lease has
        expired, ``failed`` with its lease cleared, so that the next redelivery takes it over.
        A ``processing`` row with a live lease is released only with ``force`` (its attempt may
        still be running: a redelivery would then reach the app concurrently). The lease is
        checked in the same atomic step as the update. Returns False if no row qualified."""
        ...

    async def purge(self, provider: str, older_than_seconds: float, batch_size: int) -> int:
        """Delete up to ``batch_size`` rows of ``provider`` received more than
        ``older_than_seconds`` ago, never a ``processing`` row with a live lease."""
        ...

    async def bind_nonce(self, provider: str, nonce: str, body_sha256: bytes) -> bytes:
        """Bind a signature nonce to the body hash first seen with it (atomically, across
        processes) and return the bound hash: a different one means the signed nonce was
        replayed with another body."""
        ...

    async def purge_nonces(self, provider: str, older_than_seconds: float,
                           batch_size: int) -> int:
        """Delete up to ``batch_size`` nonces of ``provider`` older than the given age."""
        ...

    async def ping(self) -> None:
        """Raise ``StoreError`` unless the database answers."""
        ...

    async def close(self) -> None: ...
