"""What the delivery pipeline reports besides its answers: claim latency and payload
mismatches, as metrics and a warning line (``sidecar.delivery.Observer``)."""

from __future__ import annotations

from sidecar.obs.logs import get_logger
from sidecar.obs.metrics import Metrics

log = get_logger("sidecar.delivery")


class DeliveryTelemetry:
    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def claimed(self, provider: str, seconds: float) -> None:
        self._metrics.claim_latency.labels(provider).observe(seconds)

    def payload_mismatch(self, provider: str, event_id: str) -> None:
        self._metrics.payload_mismatches.labels(provider).inc()
        log.warning("payload_mismatch", provider=provider, event_id=event_id)

    def limited(self, provider: str, limit: str) -> None:
        self._metrics.delivery_limited.labels(provider, limit).inc()

    def unclaimed_forward(self, provider: str, event_ids: tuple[str, ...], error: str) -> None:
        self._metrics.unclaimed_forwards.labels(provider).inc()
        log.warning("unclaimed_forward", provider=provider, event_ids=list(event_ids),
                    store_error=error)
