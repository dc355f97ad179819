"""The bounded queue of ended spans and the thread that exports them in batches, in place of
the SDK's ``BatchSpanProcessor`` (why: docs/benchmarks.md, "Tracing cost"). Never blocks the
delivery path: a span that finds the queue full is dropped and counted."""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from opentelemetry.sdk.trace import SpanProcessor

if TYPE_CHECKING:
    from sidecar.obs.otel import SpanRecord

log = logging.getLogger("sidecar.obs.otel")  # the tracing logger, one name for both modules

Dropped = Callable[[str, int], None]  # (reason, spans)


def _env_number(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        log.warning("$%s is not a number; %s it is", name, default)
        return default


class SpanQueue(SpanProcessor):
    """The bounded queue of ended spans and the thread that exports them, in batches of
    ``OTEL_BSP_MAX_EXPORT_BATCH_SIZE`` (default 512) at least every ``OTEL_BSP_SCHEDULE_DELAY``
    ms (default 5000), as the SDK's ``BatchSpanProcessor`` does. ``put`` never blocks: a span
    that finds the queue full is dropped and counted (``queue_full``); the spans of an export
    that failed (after the exporter's own retries) or raised are counted as ``export_failed``.
    Added to the provider, so its ``force_flush`` and ``shutdown`` reach the queue."""

    def __init__(self, exporter: RecordExporter, *, max_queue_size: int, dropped: Dropped,
                 schedule_delay_millis: float | None = None) -> None:
        self._exporter = exporter
        self._max_queue_size = max_queue_size
        self._batch = max(1, min(int(_env_number("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512)),
                                 max_queue_size))
        self._delay = (schedule_delay_millis if schedule_delay_millis is not None
                       else _env_number("OTEL_BSP_SCHEDULE_DELAY", 5000)) / 1000
        self._dropped = dropped
        self._queue: deque[SpanRecord] = deque()
        self._wake = threading.Event()
        self._lock = threading.Lock()  # guards _flushed
        self._flushed: list[threading.Event] = []  # force_flush calls waiting for the thread
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="span-export", daemon=True)
        self._thread.start()

    def put(self, record: SpanRecord) -> None:
        """Queue an ended span (the delivery path; never blocks)."""
        if self._stopping:
            return
        queued = len(self._queue)
        if queued >= self._max_queue_size:
            self._dropped("queue_full", 1)
            return
        self._queue.append(record)  # deque.append is atomic: no lock
        if queued + 1 == self._batch:  # wake the thread once per batch, not per span
            self._wake.set()

    def _run(self) -> None:
        while True:
            self._wake.wait(self._delay)
            self._wake.clear()
            with self._lock:
                flushed, self._flushed = self._flushed, []
            self._export_queued()
            for event in flushed:
                event.set()
            if self._stopping:
                self._export_queued()
                return

    def _export_queued(self) -> None:
        """Export the spans queued now, a batch at a time."""
        queued = len(self._queue)
        while queued > 0:
            count = min(queued, self._batch)
            batch = [self._queue.popleft() for _ in range(count)]
            queued -= count
            try:
                exported = self._exporter.export(batch)
            except Exception:
                log.exception("exporting %d spans failed", len(batch))
                exported = False
            if not exported:
                self._dropped("export_failed", len(batch))

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        if not self._thread.is_alive():
            return not self._queue
        done = threading.Event()
        with self._lock:
            self._flushed.append(done)
        self._wake.set()
        return done.wait(timeout_millis / 1000)

    def shutdown(self) -> None:
        # The exporter stops retrying first: the final export tries each batch once, so a
        # collector that is down cannot keep the thread (and the join) past shutdown's bound.
        self._exporter.stop()
        self._stopping = True
        self._wake.set()
        self._thread.join()
        self._exporter.shutdown()


class RecordExporter(Protocol):
    """Sends span records somewhere, from the export thread."""

    def export(self, records: Sequence[SpanRecord]) -> bool:
        """Whether they were taken (False, or raising: they are counted as dropped)."""

    def stop(self) -> None:
        """No more retries: each export from now on is tried once (called before the last)."""

    def shutdown(self) -> None: ...
