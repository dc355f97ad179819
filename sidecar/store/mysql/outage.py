"""A MySQL outage, reported once (``StoreObserver.unavailable`` at its first failed call,
``.recovered`` at the first call that succeeds after it), as the PostgreSQL store reports
its own: each delivery's line still says ``store_error``."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

import asyncmy

from sidecar.core.errors import RowLocked, StoreClosed, StoreError
from sidecar.store.observer import Outage as StoreOutage
from sidecar.store.observer import StoreObserver

# Server and client error codes that say the server is gone, going or refusing connections
# (the rest are the server answering one statement: not an outage).
_GONE: Final = frozenset({
    1040,  # ER_CON_COUNT_ERROR: too many connections
    1047,  # ER_UNKNOWN_COM_ERROR: a Galera node not (or no longer) part of a primary component
    1053,  # ER_SERVER_SHUTDOWN
    1927,  # ER_CONNECTION_KILLED (MariaDB)
    2002, 2003,  # CR_CONNECTION_ERROR, CR_CONN_HOST_ERROR: cannot connect
    2006, 2013,  # CR_SERVER_GONE_ERROR, CR_SERVER_LOST
    2055,  # CR_SERVER_LOST_EXTENDED
})


def is_outage(error: StoreError) -> bool:
    """Whether a failed call means the server is unreachable, down or too slow (rather than a
    held row, a closed store or one refused statement)."""
    if isinstance(error, RowLocked | StoreClosed):
        return False
    cause = error.__cause__
    if isinstance(cause, asyncmy.errors.InterfaceError):
        return True  # the connection is closed
    if isinstance(cause, asyncmy.errors.Error):
        return bool(cause.args) and cause.args[0] in _GONE
    return True  # a deadline, no pooled connection in time, a socket error


class Outage(StoreOutage):
    """Tracks one MySQL store's outages from the outcome of its calls."""

    def __init__(self, observer: StoreObserver,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(observer, is_outage, clock)
