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
from sidecar.store.observer import Outage, StoreObserver

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


class OutageLog(Outage, logging.Filter):
    """Tracks one store's outages from the outcome of its calls. Also a logging filter on
    asyncpg's loggers: below error, their lines are dropped while an outage is on."""

    def __init__(self, observer: StoreObserver,
                 clock: Callable[[], float] = time.monotonic) -> None:
        Outage.__init__(self, observer, is_outage, clock)
        logging.Filter.__init__(self)

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.on or record.levelno >= logging.ERROR
