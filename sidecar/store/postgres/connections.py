"""The pool and its connections: opening them, borrowing one for a call, and what becomes of it
after: given back when it works, closed at once when it may be broken.

A connection that fails is never reused: a broken socket, a protocol in an unknown state or a
session the server ended would fail the next call too. A statement the server refused leaves
its session going, and its connection goes back to the pool.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, TypeVar

import asyncpg

from sidecar.core.errors import StoreClosed, StoreError
from sidecar.store.postgres.faults import (
    DRIVER_ERRORS,
    ConnectionLost,
    cancelling,
    describe,
    refusal,
    server_refused,
)
from sidecar.store.sqlfiles import statement

T = TypeVar("T")

DIALECT: Final = "postgres"  # the store's SQL files: sql/postgres/*.sql

_CLOSE_ERRORS: Final[tuple[type[BaseException], ...]] = (TimeoutError, *DRIVER_ERRORS)

Connect = Callable[[str], Awaitable[asyncpg.Connection]]
"""How a call gets its connection (``Connections.pooled``, ``Connections.answering``), given
the call's name for its error messages."""


def startup_parameters(*, statement_timeout: float, lock_timeout: float,
                     idle_in_transaction_timeout: float, session_settings: bool,
                     ) -> dict[str, str]:
    """The connection startup parameters of the store's sessions (see ``PostgresStore.connect``).
    """
    settings: dict[str, str] = {"application_name": "webhook-sidecar"}
    if session_settings:
        settings |= {
            "statement_timeout": _ms(statement_timeout),
            "lock_timeout": _ms(lock_timeout),
            "idle_in_transaction_session_timeout": _ms(idle_in_transaction_timeout),
            # ON CONFLICT DO NOTHING waits-then-skips only at READ COMMITTED; higher levels
            # raise serialization failures instead. Pin it against a changed server default.
            "default_transaction_isolation": "read committed",
        }
    return settings


async def open_pool(dsn: str, *, connect_timeout: float, server_settings: Mapping[str, str],
                    **options: int | float) -> asyncpg.Pool:
    """An asyncpg pool (``options``: its sizes, ``command_timeout``, ``statement_cache_size``);
    ``StoreError`` if it cannot be opened within ``connect_timeout``."""
    try:
        # create_pool opens min_size connections concurrently; bound the whole of it.
        async with asyncio.timeout(connect_timeout + 1.0):
            return await asyncpg.create_pool(dsn, server_settings=dict(server_settings),
                                             timeout=connect_timeout,
                                             reset=_no_session_state, **options)
    except DRIVER_ERRORS as exc:
        raise StoreError(f"cannot connect to PostgreSQL: {describe(exc)}") from exc


async def close_within(conn: asyncpg.Connection, timeout: float) -> None:
    """Close a connection within ``timeout``, else abort it."""
    if conn.is_closed():
        return
    try:
        async with asyncio.timeout(timeout):
            await conn.close()
    except _CLOSE_ERRORS:
        conn.terminate()
    except BaseException:
        conn.terminate()
        raise


def discard(conn: asyncpg.Connection) -> None:
    """Close a connection that may be broken, at once, so the pool opens a new one in its
    place. If asyncpg has already closed it and handed it back to the pool, there is nothing
    left to do (calling it then raises InterfaceError)."""
    with contextlib.suppress(Exception):
        conn.terminate()


class Connections:
    """The store's pool: a connection for each call, and back after it (or closed)."""

    def __init__(self, pool: asyncpg.Pool, *, acquire_timeout: float) -> None:
        self.pool = pool
        self._acquire_timeout = acquire_timeout

    @property
    def closing(self) -> bool:
        return bool(self.pool.is_closing())

    async def using(self, name: str, connection: Connect,
                    work: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        """``work`` on one connection, given back to the pool after, or closed if it failed.
        Raises ``ConnectionLost`` when the connection failed, the ``StoreError`` of a refusal
        when the server refused the work."""
        conn = await connection(name)
        try:
            result = await work(conn)
        except Exception as exc:
            if not server_refused(exc):
                # A broken socket, a protocol in an unknown state, a session the server ended:
                # this connection is never used again, and the statement's fate is unknown.
                discard(conn)
                raise ConnectionLost(describe(exc)) from exc
            await self._give_back(conn)
            raise refusal(name, exc) from exc
        except BaseException as exc:
            # Cancelled (the deadline, or the caller): asyncpg has sent the server a cancel
            # request; the connection is closed now rather than given back to the pool after
            # waiting for the cancellation (which a hung server never confirms).
            discard(conn)
            if isinstance(exc, asyncio.CancelledError) and not cancelling():
                # The driver's own CancelledError, not a cancellation of this task.
                raise ConnectionLost(describe(exc)) from exc
            raise
        await self._give_back(conn)
        return result

    async def pooled(self, name: str) -> asyncpg.Connection:
        """A connection from the pool (opened anew if the pooled one is known to be closed)."""
        try:
            if self.pool.get_idle_size():
                # An open connection is idle: the acquire takes it without awaiting anything
                # (the pool hands out open connections first), so it needs no timer.
                conn: asyncpg.Connection = await self.pool.acquire()
                return conn
            # The bound as a timeout scope, not asyncpg's own: that is asyncio.wait_for, a task
            # and two more event-loop turns on every call (bench.lone).
            async with asyncio.timeout(self._acquire_timeout):
                conn = await self.pool.acquire()
        except Exception as exc:
            if self.closing:
                raise StoreClosed(f"{name}: the PostgreSQL store is closed") from exc
            raise StoreError(f"{name}: no database connection: {describe(exc)}") from exc
        return conn

    async def answering(self, name: str) -> asyncpg.Connection:
        """A pooled connection that has just answered a ping, for repeating a call. After one
        connection failed, more of the pool's idle ones often have too (a server restart, a
        failover, backends terminated together): each is closed in turn until one answers."""
        for _ in range(self.pool.get_max_size() + 1):
            conn = await self.pooled(name)
            try:
                await conn.fetch(statement(DIALECT, "ping").sql)
            except Exception:
                discard(conn)
                continue
            except BaseException as exc:
                discard(conn)
                if isinstance(exc, asyncio.CancelledError) and not cancelling():
                    continue  # the driver's own CancelledError: this connection is no good
                raise
            return conn
        raise StoreError(f"{name}: no pooled connection answers")

    async def close(self, grace: float) -> None:
        """Close the pool, waiting up to ``grace`` for borrowed connections, then abort them."""
        try:
            async with asyncio.timeout(grace):
                await self.pool.close()
        except _CLOSE_ERRORS:
            self.pool.terminate()

    async def _give_back(self, conn: asyncpg.Connection) -> None:
        """Return a connection that works to the pool (a local step, no round trip); if the
        pool refuses it, close it instead."""
        try:
            holder = _idle_holder(conn)
            if holder is not None:
                # Pool.release runs the holder's release in a task of its own under
                # asyncio.shield, so that a cancelled caller cannot leave a connection
                # half-returned: two event-loop turns per call before the caller goes on
                # (bench.lone). For a connection outside a transaction and not cancelling, with
                # the pool's reset a no-op, the holder's release awaits nothing: run here, it
                # finishes before anything else runs, so there is nothing to shield it from.
                conn._con._on_release()
                await holder.release(self._acquire_timeout)
                return
            # The acquire gave the connection no timeout: its reset gets the acquire's bound.
            await self.pool.release(conn, timeout=self._acquire_timeout)
        except Exception:
            discard(conn)


def _idle_holder(conn: asyncpg.Connection) -> Any:
    """The pool's holder of ``conn`` if releasing it awaits nothing (no transaction to roll
    back, no cancellation to wait for, the pool's reset is ours), else None: asyncpg's
    ``Pool.release`` then. Reads
    asyncpg's internals (``PoolConnectionProxy._holder``, ``._con``, the protocol's
    ``_is_cancelling``); if a release of asyncpg names them differently, None."""
    holder = getattr(conn, "_holder", None)
    con = getattr(conn, "_con", None)
    protocol = getattr(con, "_protocol", None)
    is_cancelling = getattr(protocol, "_is_cancelling", None)
    own_reset = getattr(getattr(holder, "_pool", None), "_reset", None) is _no_session_state
    if (holder is None or con is None or is_cancelling is None or not own_reset
            or is_cancelling()
            or con.is_in_transaction() or not hasattr(con, "_on_release")
            or not hasattr(holder, "release")):
        return None
    return holder


def _ms(seconds: float) -> str:
    return str(max(0, round(seconds * 1000)))


async def _no_session_state(conn: asyncpg.Connection) -> None:
    """The pool's per-release reset. The store never changes session state (no SET, LISTEN,
    cursors, session advisory locks, open transactions), so asyncpg's default reset query
    (``RESET ALL; UNLISTEN *; …``) would only add a round trip to every call."""
