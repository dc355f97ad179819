"""What a store reports (``sidecar.store.observer.StoreObserver``): its outages and queue mode's
notifications as log lines of the ``sidecar.store`` logger, and how its coalesced writes went
out as metrics (``webhook_store_batch_size``, ``webhook_store_singles_total``) when given
``Metrics``."""

from __future__ import annotations

from sidecar.obs.logs import get_logger
from sidecar.obs.metrics import Metrics

log = get_logger("sidecar.store")


class StoreLog:
    def __init__(self, metrics: Metrics | None = None) -> None:
        self._metrics = metrics

    def unavailable(self, error: str, driver_error: BaseException | None) -> None:
        log.error("store_unavailable", error=error, exc_info=driver_error)

    def recovered(self, outage_seconds: float, failed_calls: int) -> None:
        log.info("store_recovered", outage_s=round(outage_seconds, 3), failed_calls=failed_calls)

    def listen_lost(self, error: str, retry_in_seconds: float) -> None:
        log.warning("queue_listen_lost", error=error, retry_in_s=retry_in_seconds)

    def listen_restored(self, outage_seconds: float) -> None:
        log.info("queue_listen_restored", outage_s=round(outage_seconds, 3))

    def wake_failed(self, provider: str, error: str) -> None:
        log.error("queue_wake_failed", provider=provider, error=error)

    def statement_sent(self, verb: str, calls: int) -> None:
        if self._metrics is None:
            return
        self._metrics.store_batch_size.labels(verb).observe(calls)
        if calls == 1:
            self._metrics.store_singles.labels(verb).inc()
