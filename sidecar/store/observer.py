"""What a store reports besides its answers: a database outage, queue mode's notifications, and
how its coalesced writes went out.

The store says what happened; ``sidecar.obs.storelog.StoreLog`` writes it as log lines
(``store_unavailable``, ``store_recovered``, ``queue_listen_lost``, …) and metrics (the
statements' sizes), and ``sidecar.runtime.wiring`` passes it in. A store made without one
reports nothing.
"""

from __future__ import annotations

from typing import Protocol


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
