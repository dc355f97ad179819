"""One attempt: send a delivery to the app, classify the answer, record it on the row.

Shared by the delivery pipeline and by operators re-driving a stored event.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Sequence
from typing import Protocol

from sidecar.config.model import ProviderConfig
from sidecar.core.batch import batch_key
from sidecar.core.decision import result_of
from sidecar.core.errors import StoreError, UpstreamError
from sidecar.core.events import AttemptResult, Forwarded, Outcome, RecordedResponse
from sidecar.core.headers import (
    ATTEMPT_HEADER,
    BATCH_SIZE_HEADER,
    EVENT_HEADER,
    IDEMPOTENCY_HEADER,
    PROVIDER_HEADER,
)
from sidecar.core.ports import Store
from sidecar.obs.logs import get_logger
from sidecar.obs.metrics import Metrics
from sidecar.upstream import forwardable_headers

log = get_logger("sidecar.forwarding")


class Sender(Protocol):
    """Sends one request to the app (``sidecar.upstream.Upstream``, or a test double)."""

    async def send(self, method: str, path_qs: str, headers: list[tuple[str, str]],
                   body: bytes) -> RecordedResponse: ...


class Forwarder:
    def __init__(self, store: Store, upstream: Sender, metrics: Metrics,
                 pending: set[asyncio.Task[bool]]) -> None:
        self._store = store
        self._upstream = upstream
        self._metrics = metrics
        self._pending = pending  # result writes in progress, awaited on shutdown

    async def forward(
        self, provider: ProviderConfig, rows: Sequence[tuple[str, int]], method: str,
        path: str, headers: Iterable[tuple[str, str]], body: bytes,
    ) -> Forwarded:
        """Forward once on behalf of ``rows`` (``(event_id, attempt)`` pairs: one, or the
        items a batch delivery claimed) and record the result on each of them."""
        ids = [event_id for event_id, _ in rows]
        attempt = max(attempt for _, attempt in rows)
        added = {
            PROVIDER_HEADER: provider.key,
            ATTEMPT_HEADER: str(attempt),
        }
        if provider.event_id.is_batch:
            # Items are grouped per delivery, so the key names this group; apps dedupe per
            # item id, which each item in the body carries.
            added[IDEMPOTENCY_HEADER] = batch_key(provider.key, ids)
            added[BATCH_SIZE_HEADER] = str(len(ids))
        else:
            added[IDEMPOTENCY_HEADER] = f"{provider.key}:{ids[0]}"
            added[EVENT_HEADER] = ids[0]
        started = time.monotonic()
        response: RecordedResponse | None = None
        error: str | None = None
        try:
            response = await self._upstream.send(
                method, path, forwardable_headers(headers, added), body)
            outcome = Outcome.RESPONSE
        except UpstreamError as exc:
            outcome = Outcome(exc.outcome)
            error = exc.detail or exc.outcome
        elapsed = time.monotonic() - started
        self._metrics.upstream_latency.labels(provider.key).observe(elapsed)
        result = result_of(outcome, response, elapsed * 1000, provider.retryable_statuses)
        recorded, record_error = await self._record(provider.key, rows, result)
        return Forwarded(attempt, result, response, error, recorded, record_error)

    async def _record(self, provider: str, rows: Sequence[tuple[str, int]],
                      result: AttemptResult) -> tuple[bool | None, str | None]:
        """Write the result on every row, protected from cancellation of the caller (a
        shutdown past its timeout, or a client that went away): all writes are started before
        any is awaited, go on regardless, and are awaited on shutdown."""
        tasks = [asyncio.ensure_future(self._store.complete(provider, event_id, attempt, result))
                 for event_id, attempt in rows]
        for task in tasks:
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)
        outcomes = await asyncio.shield(asyncio.gather(*tasks, return_exceptions=True))
        error: str | None = None
        for (event_id, attempt), outcome in zip(rows, outcomes, strict=True):
            if isinstance(outcome, StoreError):
                # The app has answered; we could not record it. The row stays `processing`
                # until its lease expires, then a redelivery is forwarded again (attempt + 1).
                log.error("record_failed", provider=provider, event_id=event_id,
                          attempt=attempt, error=str(outcome))
                error = error or str(outcome)
            elif isinstance(outcome, BaseException):
                raise outcome
            elif not outcome:
                self._metrics.superseded.labels(provider).inc()
                log.warning("attempt_superseded", provider=provider, event_id=event_id,
                            attempt=attempt)
        if error is not None:
            return None, error
        return all(outcomes), None
