"""What the driver's errors mean for a call: refused by a server that goes on answering, or a
connection that failed with the statement's fate unknown; and how each is reported.

Every call ends in rows or a ``StoreError``, never in a driver error: the translation happens
here and in :mod:`~sidecar.store.postgres.connections` (which connection a failure condemns),
and :mod:`~sidecar.store.postgres.again` decides what is repeated.
"""

from __future__ import annotations

import asyncio
from typing import Final

import asyncpg

from sidecar.core.errors import RowLocked, StoreError

# Everything the driver or the network can throw at us; translated to StoreError at the edge.
# (asyncio.TimeoutError is TimeoutError, an OSError; ConnectionError is an OSError too.)
DRIVER_ERRORS: Final[tuple[type[BaseException], ...]] = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    OSError,
)

# A batch the server refused for one of its items (a row another session holds, a deadlock
# with another batch, a unique violation while the key is rebuilt, a bad value): its items run
# one by one, so that only that item's call fails, as it would have alone. Nothing was written.
_ONE_BY_ONE_SQLSTATES: Final = frozenset({"55P03", "40P01", "40001", "23505"})


# The partitioned store's uniqueness triggers refuse an insert at any isolation level but READ
# COMMITTED (partitioning/functions.sql): the role's default is another level.
NOT_READ_COMMITTED: Final = "WS001"


def not_read_committed(exc: BaseException) -> bool:
    return isinstance(exc, asyncpg.PostgresError) and exc.sqlstate == NOT_READ_COMMITTED


class ConnectionLost(Exception):
    """The connection failed mid-call; the statement may or may not have run."""


def describe(exc: BaseException) -> str:
    text = str(exc).strip()
    kind = type(exc).__name__
    return f"{kind}: {text}" if text else kind


def server_refused(exc: Exception) -> bool:
    """The server answered the statement with an error, and the session goes on (a lock or
    statement timeout, a constraint): the connection can be reused."""
    if not isinstance(exc, asyncpg.PostgresError):
        return False  # raised by the driver itself: socket, protocol state, pool
    if isinstance(exc, asyncpg.PostgresConnectionError):
        return False
    # Class 57P (admin shutdown, crash shutdown, cannot connect now, database dropped, idle
    # session timeout) and FATAL errors end the session.
    return not (exc.sqlstate or "").startswith("57P") and \
        getattr(exc, "severity_en", None) not in ("FATAL", "PANIC")


def refusal(name: str, exc: Exception) -> StoreError:
    """The ``StoreError`` for a statement the server refused (raise it ``from exc``)."""
    if isinstance(exc, asyncpg.LockNotAvailableError):
        return RowLocked(f"{name}: the event row is locked by another session "
                         f"({describe(exc)})")
    return StoreError(f"{name}: {describe(exc)}")


def refused_for_one_item(error: StoreError) -> bool:
    """Whether a batch failed because the server refused one of its items: then its items are
    run one by one (``_ONE_BY_ONE_SQLSTATES``, and class 22, a bad value)."""
    cause = error.__cause__
    return isinstance(cause, asyncpg.PostgresError) and (
        cause.sqlstate in _ONE_BY_ONE_SQLSTATES or (cause.sqlstate or "").startswith("22"))


def key_being_rebuilt(error: StoreError) -> bool:
    """A unique violation can escape ON CONFLICT while the primary key is being rebuilt
    concurrently (REINDEX CONCURRENTLY): someone else holds the key."""
    return isinstance(error.__cause__, asyncpg.UniqueViolationError)


def no_answer(name: str, deadline: float | None) -> StoreError:
    """The ``StoreError`` of a call past the store deadline (raise it ``from`` the timeout)."""
    return StoreError(f"{name}: no answer within the store deadline ({deadline}s)")


def cancelling() -> bool:
    """Whether this task is being cancelled (else a ``CancelledError`` is the driver's own)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
