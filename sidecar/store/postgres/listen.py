"""Queue mode's wake-ups: LISTEN on a connection of the store's own.

``enqueue.sql`` and ``requeue_dead.sql`` NOTIFY ``QUEUE_CHANNEL`` with the provider's key as
payload, at commit; every process's store LISTENs and wakes that provider's workers. A missed
notification costs latency only: the workers poll as well.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Final

import asyncpg

from sidecar.store.observer import StoreObserver
from sidecar.store.postgres.connections import close_within, discard
from sidecar.store.postgres.faults import DRIVER_ERRORS, describe

QUEUE_CHANNEL: Final = "webhook_sidecar_queue"
_LISTEN_APPLICATION: Final = "webhook-sidecar listen"
_LISTEN_RETRY_FIRST: Final = 0.1  # seconds before reconnecting a lost LISTEN connection,
_LISTEN_RETRY_MAX: Final = 5.0  # doubling up to this
# How long the LISTEN connection may stay silent before a round trip checks it: a connection
# cut without a FIN or RST (a network partition, a hung server) is noticed within this.
_LISTEN_CHECK: Final = 30.0


class QueueListener:
    """LISTENs for queued work on connections of its own (never pooled ones: a LISTEN belongs
    to its session, which must outlive every call), opened with the store's settings."""

    def __init__(self, dsn: str, *, server_settings: Mapping[str, str], connect_timeout: float,
                 observer: StoreObserver) -> None:
        self._dsn = dsn
        self._server_settings = {**server_settings, "application_name": _LISTEN_APPLICATION}
        self._connect_timeout = connect_timeout
        self._observer = observer
        self._listening: set[asyncpg.Connection] = set()

    async def listen(self, wake: Callable[[str], None], closed: Callable[[], bool]) -> None:
        """Call ``wake(provider)`` per notification, until cancelled. A lost connection is
        reported once and opened again, first after 0.1 s, then up to 5 s apart; notifications
        sent meanwhile are lost (the workers' poll finds that work). Once ``closed()``, waits."""
        delay = _LISTEN_RETRY_FIRST
        lost_since: float | None = None

        def listening() -> None:
            nonlocal delay, lost_since
            if lost_since is not None:
                self._observer.listen_restored(time.monotonic() - lost_since)
                lost_since = None
            delay = _LISTEN_RETRY_FIRST

        while True:
            if closed():
                await asyncio.Event().wait()
            try:
                await self._listen_once(wake, listening)
                error = "connection closed"
            except DRIVER_ERRORS as exc:
                error = describe(exc)
            if lost_since is None and not closed():
                lost_since = time.monotonic()
                self._observer.listen_lost(error, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, _LISTEN_RETRY_MAX)

    def stop(self) -> None:
        """Close the listening connections at once (``listen`` then waits until cancelled)."""
        for conn in list(self._listening):
            discard(conn)

    async def _listen_once(self, wake: Callable[[str], None],
                           listening: Callable[[], None]) -> None:
        """One LISTEN connection, from its opening until it is lost (or the call cancelled);
        ``listening()`` once the LISTEN is in force."""
        conn = await asyncpg.connect(self._dsn, timeout=self._connect_timeout,
                                     server_settings=self._server_settings)
        self._listening.add(conn)
        try:
            ended = asyncio.Event()
            conn.add_termination_listener(lambda _conn: ended.set())
            async with asyncio.timeout(self._connect_timeout):  # a hung server: try again
                await conn.add_listener(QUEUE_CHANNEL, self._waker(wake))
            listening()
            await _until_lost(conn, ended, self._connect_timeout)
        finally:
            self._listening.discard(conn)
            await close_within(conn, self._connect_timeout)

    def _waker(self, wake: Callable[[str], None]) -> Callable[[object, int, str, str], None]:
        """asyncpg's notification callback for ``wake``: a failing ``wake`` is reported, and
        the connection listens on."""

        def notified(_conn: object, _pid: int, _channel: str, payload: str) -> None:
            try:
                wake(payload)
            except Exception as exc:
                self._observer.wake_failed(payload, describe(exc))

        return notified


async def _until_lost(conn: asyncpg.Connection, ended: asyncio.Event, timeout: float) -> None:
    """Return when ``conn`` has ended: closed by the server or the network (asyncpg's
    termination listener sets ``ended``), or found dead by a round trip after a silence."""
    while not ended.is_set():
        try:
            async with asyncio.timeout(_LISTEN_CHECK):
                await ended.wait()
        except TimeoutError:
            await conn.fetchval("SELECT 1", timeout=timeout)
