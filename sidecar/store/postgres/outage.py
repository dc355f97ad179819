"""A database outage, reported once: its first failed call with the driver's exception, its end
with how long it lasted and how many calls failed (``StoreObserver.unavailable``,
``.recovered``). Each delivery's own line still says ``store_error`` (at warning); in between,
asyncpg's pool repeats "Failed to restore the pool connection floor" every second or so, and
those lines are muted until the store answers again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import asyncpg

from sidecar.core.errors import RowLocked, StoreClosed, StoreError
from sidecar.store.observer import StoreObserver

# The database refused one statement, but it is there and answering: not an outage.
_ANSWERING = asyncpg.PostgresError
# …except these, which say the server is going away, refusing connections or too slow.
_UNAVAILABLE = (asyncpg.PostgresConnectionError, asyncpg.CannotConnectNowError,
                asyncpg.AdminShutdownError, asyncpg.CrashShutdownError,
                asyncpg.QueryCanceledError)

# The pool's own logger (stdlib logging): its reconnect warnings are muted during an outage.
POOL_LOG = logging.getLogger("asyncpg.pool")


def is_outage(error: StoreError) -> bool:
    """Whether a failed call means the database is unreachable, down or too slow (rather than
    a locked row, a closed store or one refused statement)."""
    if isinstance(error, RowLocked | StoreClosed):
        return False
    cause = error.__cause__
    return not isinstance(cause, _ANSWERING) or isinstance(cause, _UNAVAILABLE)


class OutageLog(logging.Filter):
    """Tracks one store's outages from the outcome of its calls. Also a logging filter on
    asyncpg's loggers: below error, their lines are dropped while an outage is on."""

    def __init__(self, observer: StoreObserver,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._observer = observer
        self._clock = clock
        self._since: float | None = None
        self._failures = 0

    @property
    def on(self) -> bool:
        return self._since is not None

    def failed(self, error: StoreError) -> None:
        if not is_outage(error):
            return
        self._failures += 1
        if self._since is None:
            self._since = self._clock()
            # The driver's own exception carries the detail (refused, reset, shut down); its
            # traceback says where. Connection-level errors quote no request data. A deadline
            # has no such detail: its traceback would be the event loop's.
            cause = error.__cause__
            driver = cause is not None and not isinstance(cause, TimeoutError)
            self._observer.unavailable(str(error), cause if driver else None)

    def succeeded(self) -> None:
        if self._since is None:
            return
        self._observer.recovered(self._clock() - self._since, self._failures)
        self._since, self._failures = None, 0

    def filter(self, record: logging.LogRecord) -> bool:
        return self._since is None or record.levelno >= logging.ERROR
