"""What a store reports besides its answers: a database outage, queue mode's notifications, and
how its coalesced writes went out.

The store says what happened; ``sidecar.obs.storelog.StoreLog`` writes it as log lines
(``store_unavailable``, ``store_recovered``, ``queue_listen_lost``, …) and metrics (the
statements' sizes), and ``sidecar.runtime.wiring`` passes it in. A store made without one
reports nothing.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from sidecar.core.errors import StoreError

T = TypeVar("T")


class StoreObserver(Protocol):
    def unavailable(self, error: str, driver_error: BaseException | None) -> None:
        """The first failed call of an outage. ``driver_error``: the driver's own exception,
        whose traceback says where (None when there is none worth showing, as for a deadline:
        its traceback would be the event loop's)."""

    def recovered(self, outage_seconds: float, failed_calls: int) -> None:
        """The first call that succeeded after an outage."""

    def listen_lost(self, error: str, retry_in_seconds: float) -> None:
        """The connection listening for queued work was lost (once per loss)."""

    def listen_restored(self, outage_seconds: float) -> None:
        """It listens again."""

    def wake_failed(self, provider: str, error: str) -> None:
        """Waking ``provider``'s workers for a notification raised; the connection listens on."""

    def statement_sent(self, verb: str, calls: int) -> None:
        """A statement of a coalesced write (``claim``, ``complete``, ``bind_nonce``) went out
        carrying ``calls`` calls; 1: a call that went alone. Called on the event loop, on the
        write path: it must be cheap and must not raise."""


class Unobserved:
    """A ``StoreObserver`` that reports nothing."""

    def unavailable(self, error: str, driver_error: BaseException | None) -> None:
        pass

    def recovered(self, outage_seconds: float, failed_calls: int) -> None:
        pass

    def listen_lost(self, error: str, retry_in_seconds: float) -> None:
        pass

    def listen_restored(self, outage_seconds: float) -> None:
        pass

    def wake_failed(self, provider: str, error: str) -> None:
        pass

    def statement_sent(self, verb: str, calls: int) -> None:
        pass


class Outage:
    """One store's outages, told from the outcome of its calls: reported once, at the first
    failed call that ``is_outage`` (the driver's own reading of the error) counts, and its end
    at the next call that succeeds, with how long it lasted and how many calls failed."""

    def __init__(self, observer: StoreObserver, is_outage: Callable[[StoreError], bool],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._observer = observer
        self._is_outage = is_outage
        self._clock = clock
        self._since: float | None = None
        self._failures = 0

    @property
    def on(self) -> bool:
        return self._since is not None

    def failed(self, error: StoreError) -> None:
        if not self._is_outage(error):
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

    async def told(self, call: Awaitable[T]) -> T:
        """``call``'s answer, its outcome told: ``failed`` on a ``StoreError``, else
        ``succeeded``."""
        try:
            answer = await call
        except StoreError as exc:
            self.failed(exc)
            raise
        self.succeeded()
        return answer
