"""Prometheus metrics on an injected registry (never the global one).

With ``workers: N`` > 1 every worker process writes its metrics to files in one directory
(prometheus_client's multiprocess mode, chosen by ``PROMETHEUS_MULTIPROC_DIR`` in the
environment before prometheus_client is imported: the supervisor sets it when it starts the
workers), and the worker serving ``/metrics`` renders the sum over all of them
(``Metrics(multiprocess_dir=…)``). Counters and histograms are summed; the stuck-row gauge is
set by one worker only and exported as its most recent value.

``scrape()`` is what ``/metrics`` serves: ``on_scrape`` (set by the composition root) brings
gauges up to date first, within its own bounds, then the registry is rendered.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, Self

import prometheus_client
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client import values as _values
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector

from sidecar.core.workergroup import GroupHealth

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

class _KnownChildren:
    """``labels(*values)`` answers a label set asked for before from a plain dict: the
    library's own lookup converts, checks and takes a lock on every call, and a delivery asks
    for the same few children (its provider, its result) every time. A child is the library's
    own (made once by ``labels``), so what it counts is unchanged."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._known: dict[tuple[object, ...], Self] = {}

    def labels(self, *values: object, **named: object) -> Self:
        if named:
            return super().labels(*values, **named)  # type: ignore[misc, no-any-return]
        try:
            return self._known[values]
        except KeyError:
            child: Self = super().labels(*values)  # type: ignore[misc]
            self._known[values] = child
            return child

    def remove(self, *values: Any) -> None:
        self._known.clear()
        super().remove(*values)  # type: ignore[misc]

    def clear(self) -> None:
        self._known.clear()
        super().clear()  # type: ignore[misc]


class Counter(_KnownChildren, prometheus_client.Counter):
    pass


class Gauge(_KnownChildren, prometheus_client.Gauge):
    pass


class Histogram(_KnownChildren, prometheus_client.Histogram):
    pass


LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class Metrics:
    """Every metric the proxy exports. Duplicates are a normal result, not an error."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, registry: CollectorRegistry | None = None, *,
                 multiprocess_dir: str | None = None) -> None:
        if multiprocess_dir is not None and not multiprocess_enabled():
            raise RuntimeError(f"multiprocess metrics need ${MULTIPROC_ENV} set before "
                               "prometheus_client is imported")
        self.multiprocess_dir = multiprocess_dir
        # Run before each scrape renders; it must not raise, and bounds its own time.
        self.on_scrape: Callable[[], Awaitable[None]] | None = None
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self.events = self._counter(
            "webhook_events", "Deliveries by provider and result "
            "(new, duplicate, in_flight, takeover, upstream_error, mirrored_failure, "
            "payload_mismatch, invalid_signature, replayed_body, bad_request, too_large, "
            "handshake, store_error, error; filtered, unclaimed; queue mode: queued, "
            "queue_full).",
            ["provider", "result"])
        # Sub-millisecond replays of known answers up to the longest upstream timeout.
        self.delivery_duration = self._histogram(
            "webhook_delivery_duration_seconds", "Deliveries end to end, from the request's "
            "first byte received to the answer's last byte written, by provider and result "
            "(the values of webhook_events_total).", ["provider", "result"],
            buckets=(0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.02, 0.05, 0.1, 0.25,
                     0.5, 1, 2.5, 5, 10, 30, 60))
        # 1 (alone) up to the coalescer's MAX_BATCH.
        self.store_batch_size = self._histogram(
            "webhook_store_batch_size", "Calls carried by each store statement of a coalesced "
            "write (claim, complete, bind_nonce); 1: a call that went alone.", ["verb"],
            buckets=(1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64))
        self.store_singles = self._counter(
            "webhook_store_singles", "Coalesced-write calls that went to the store alone, "
            "as the single-row statement (none of their kind was waiting with them).",
            ["verb"])
        self.app_answers = self._counter(
            "webhook_app_answers", "Forwards by provider, upstream (the app's "
            "scheme://host:port) and the app's status class (2xx, 3xx, 4xx, 5xx, or none: "
            "timeout, refused, disconnected).", ["provider", "upstream", "status_class"])
        self.upstream_latency = self._histogram(
            "webhook_upstream_latency_seconds", "Time the app took to answer a forward, by "
            "provider and upstream (scheme://host:port).",
            ["provider", "upstream"], buckets=LATENCY_BUCKETS)
        self.claim_latency = self._histogram(
            "webhook_claim_latency_seconds", "Time to claim an event id in the store.",
            ["provider"], buckets=LATENCY_BUCKETS)
        self.payload_mismatches = self._counter(
            "webhook_payload_mismatches", "Deliveries whose body differs from the first one "
            "seen for the same event id.", ["provider"])
        self.unclaimed_forwards = self._counter(
            "webhook_unclaimed_forwards", "Deliveries forwarded without a claim because the "
            "store could not be reached (store_outage: forward): not deduplicated.",
            ["provider"])
        self.superseded = self._counter(
            "webhook_superseded_results", "Attempt results not recorded because a newer "
            "attempt had taken the event over.", ["provider"])
        self.stuck = self._gauge(
            "webhook_events_stuck", "Rows in processing whose lease has expired (a crashed or "
            "abandoned attempt); refreshed by the maintenance loop.", ["provider"])
        self.retention_deleted = self._counter(
            "webhook_retention_deleted", "Event rows deleted by retention.", ["provider"])
        self.trace_spans_dropped = self._counter(
            "webhook_trace_spans_dropped", "Trace spans not exported, by reason: queue_full "
            "(tracing.max_queue_size reached while the collector is slow or down), "
            "export_failed (the collector refused them or could not be reached) or "
            "unencodable (a span the exporter could not encode).", ["reason"])
        self.maintenance_errors = self._counter(
            "webhook_maintenance_errors", "Maintenance steps (partitions, retention, stuck "
            "rows, queue gauges) that failed, by step; the others still ran.", ["step"])
        # store.partitioning (PostgreSQL): set after each maintenance round's upkeep.
        self.partitions = self._gauge(
            "webhook_partitions", "Bounded partitions attached to each partitioned table; "
            "refreshed by the maintenance loop.", ["table"])
        # An absolute time, not a lead from now: a gauge no run refreshes (maintenance failing
        # everywhere) still lets `... - time()` fall, so the alert on it fires.
        self.partitions_last_bound = self._gauge(
            "webhook_partitions_last_bound_timestamp_seconds", "Unix time at which the last "
            "bounded partition of each partitioned table ends (past it new rows land in the "
            "DEFAULT partition; 0: none); refreshed by the maintenance loop.", ["table"])
        self.partition_default_rows = self._gauge(
            "webhook_partition_default_rows", "Rows in the DEFAULT partitions (received past "
            "the last partition made; moved out when it is made); refreshed by the "
            "maintenance loop.")
        self.partitions_dropped = self._counter(
            "webhook_partitions_dropped", "Partitions dropped by retention (every row in them "
            "past its provider's retention).")
        self.secret_reloads = self._counter(
            "webhook_secret_reloads", "Secret files re-read with changed content, by provider "
            "(result: applied, or error when a file could not be read or decoded).",
            ["provider", "result"])

        # queue mode
        self.queue_depth = self._gauge(
            "webhook_queue_depth", "Queued events waiting or being delivered, per provider "
            "(all replicas); refreshed by each scrape (at most every 5 s) and the maintenance "
            "loop.", ["provider"])
        self.queue_oldest = self._gauge(
            "webhook_queue_oldest_age_seconds", "Age of the oldest queued event not yet "
            "delivered (0 when none waits); refreshed as webhook_queue_depth.", ["provider"])
        self.queue_dead = self._gauge(
            "webhook_queue_dead", "Dead (dead-lettered) events kept for re-drive; refreshed "
            "as webhook_queue_depth.", ["provider"])
        self.queue_attempts = self._counter(
            "webhook_queue_attempts", "Tries of queued events by provider, upstream "
            "(scheme://host:port) and how they ended (done, retry, dead, unreachable: the app "
            "could not be connected to, superseded: a newer take won).",
            ["provider", "upstream", "result"])
        self.forwards_in_flight = self._gauge(
            "webhook_forwards_in_flight", "Forwards to the app waiting for its answer now, per "
            "provider and upstream (this replica's processes).", ["provider", "upstream"],
            multiprocess_mode="livesum")
        self.delivery_limited = self._counter(
            "webhook_delivery_limited", "Times a provider's delivery limit held deliveries "
            "back, by limit (rate: delivery.rate, concurrency: delivery.concurrency). Queue "
            "mode: a worker's take cut short or deferred, its events left waiting; forward "
            "mode: a delivery answered 429 (also counted as webhook_events_total{result="
            "\"rate_limited\"}).", ["provider", "limit"])
        self.dead_lettered = self._counter(
            "webhook_dead_lettered", "Queued events that ran out of attempts or age and are "
            "now dead.", ["provider"])
        # notify: targets (sidecar.ops.notify)
        self.notifications = self._counter(
            "webhook_notifications", "Notification messages by kind (provider.paused, "
            "breaker.opened, dead_letters.threshold, signatures.failing, …) and result: sent, "
            "failed (every try failed, or the target refused it), suppressed (a message of the "
            "same condition went to the target within notify.interval, from any replica), "
            "dropped (the process's queue of notices was full).", ["kind", "result"])

        # held providers (pause, circuit breaker): the store's state as this process last read it
        self.provider_paused = self._gauge(
            "webhook_provider_paused", "1 while an operator has paused the provider's "
            "deliveries (every replica obeys within a second), else 0.", ["provider"])
        self.breaker_state = self._gauge(
            "webhook_breaker_state", "The provider's circuit breaker: 0 closed, 1 open, "
            "2 half-open (one probe out).", ["provider"])
        self.provider_transitions = self._counter(
            "webhook_provider_transitions", "Changes of a provider's hold state made by this "
            "process (paused, resumed, breaker_opened, breaker_reopened, breaker_closed): each "
            "change is counted once, by the replica whose statement made it.",
            ["provider", "transition"])

        self._group: GroupHealth | None = None

    # Every metric on this object's registry; a gauge's multiprocess value is the most recent
    # write unless said otherwise (one worker refreshes it).
    def _counter(self, name: str, doc: str, labels: Sequence[str] = ()) -> Counter:
        return Counter(name, doc, labels, registry=self.registry)

    def _gauge(self, name: str, doc: str, labels: Sequence[str] = (), *,
               multiprocess_mode: str = "mostrecent") -> Gauge:
        return Gauge(name, doc, labels, registry=self.registry,
                     multiprocess_mode=multiprocess_mode)

    def _histogram(self, name: str, doc: str, labels: Sequence[str],
                   buckets: Sequence[float]) -> Histogram:
        return Histogram(name, doc, labels, buckets=buckets, registry=self.registry)

    async def scrape(self) -> bytes:
        """What /metrics answers: the gauges refreshed by ``on_scrape``, then rendered."""
        if self.on_scrape is not None:
            await self.on_scrape()
        return self.render()

    def export_group(self, group: GroupHealth) -> None:
        """The worker serving /metrics for a group exports the supervisor's count of replaced
        workers (kept by the supervisor, so a replaced first worker loses none of it) and of
        vacant seats."""
        self._group = group
        if self.multiprocess_dir is None:
            self.registry.register(_GroupCollector(group))

    def render(self) -> bytes:
        return generate_latest(self._readable())

    def samples(self, names: frozenset[str]) -> list[tuple[str, dict[str, str], float]]:
        """The current value of each sample named in ``names`` (as exported: a counter's
        ``…_total``), with its labels; with workers > 1 summed over the group as ``render``
        does. For the inspector's overview: as costly as one scrape, without the text."""
        return [(sample.name, sample.labels, sample.value)
                for metric in self._readable().collect() for sample in metric.samples
                if sample.name in names]

    def _readable(self) -> CollectorRegistry:
        if self.multiprocess_dir is None:
            return self.registry
        # Every worker's files, this one's included: the sum over the group. Not described
        # when registered (auto_describe), which would read and merge every file twice.
        merged = CollectorRegistry()
        MultiProcessCollector(merged, path=self.multiprocess_dir)  # type: ignore[no-untyped-call]
        if self._group is not None:
            merged.register(_GroupCollector(self._group))
        return merged


class _GroupCollector(Collector):
    def __init__(self, group: GroupHealth) -> None:
        self._group = group

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily(
            "webhook_workers_replaced", "Workers (workers > 1) killed and replaced by the "
            "supervisor because their event loop missed its heartbeat for worker_timeout.",
            value=self._group.replaced)
        yield GaugeMetricFamily(
            "webhook_workers_vacant", "Seats of the group (workers > 1) without a worker "
            "listening: starting, or tried again after their worker could not start; their "
            "connections go to the other workers.", value=len(self._group.vacant))


def multiprocess_enabled() -> bool:
    """Whether prometheus_client keeps values in files (``$PROMETHEUS_MULTIPROC_DIR`` was set
    when it was imported)."""
    return _values.ValueClass is not _values.MutexValue and bool(os.environ.get(MULTIPROC_ENV))


def forget_process(multiprocess_dir: str, pid: int) -> None:
    """A worker that exited leaves nothing in the gauges summed over live processes (the
    in-flight forwards it held when it was killed); its counters and histograms stay in the
    sums."""
    mark_process_dead(pid, multiprocess_dir)  # type: ignore[no-untyped-call]
