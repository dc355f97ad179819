"""Background upkeep in every proxy process: retention, the stuck-row and queue gauges, secret
reloads; and the queue gauges' refresh when /metrics is scraped.

Several replicas may run it at once: retention deletes in small batches that skip locked rows,
and every step is safe to repeat.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from functools import partial

from sidecar.config.keyring import SIGNING, Keyring
from sidecar.config.model import Config, Mode
from sidecar.core.errors import StoreError
from sidecar.core.events import QueueStats
from sidecar.core.notices import NoNotices, Notices
from sidecar.core.notifying import DeadLetters
from sidecar.core.ports import PartitionUpkeep, UpkeepStore
from sidecar.obs.logs import get_logger
from sidecar.obs.metrics import Metrics

log = get_logger("sidecar.maintenance")

# A scrape of /metrics refreshes the queue gauges first, else they would be as old as
# maintenance.interval (a minute by default) — an operator watching a backlog grow would see
# none. Bounded: one store query at a time, shared by every scrape that comes while it runs; at
# most one every SCRAPE_REFRESH_EVERY seconds (scrapes in between get the values it found); and
# a scrape waits for it SCRAPE_REFRESH_WAIT seconds at most, then shows the last values, so a
# slow store never hangs a scrape (the query goes on, within the store's own deadline). The
# stuck-row gauge is left to the loop: its count scans the event table.
SCRAPE_REFRESH_EVERY = 5.0
SCRAPE_REFRESH_WAIT = 2.0


class Maintenance:
    def __init__(self, config: Config, store: UpkeepStore, metrics: Metrics,
                 keyring: Keyring, *, partitions: PartitionUpkeep | None = None,
                 notices: Notices | None = None) -> None:
        self._config = config
        self._notices = notices or NoNotices()
        threshold = config.notify.dead_letters
        self._dead_letters = (DeadLetters(threshold)
                              if threshold is not None and config.notify.targets else None)
        self._partitions = partitions
        self._store = store
        self._metrics = metrics
        self._keyring = keyring
        self._queued = tuple(p.key for p in config.routes if p.mode is Mode.QUEUE)
        self._scrape_refresh: asyncio.Task[None] | None = None  # the one in flight
        self._scrape_refreshed_at = -math.inf  # when the last one started (monotonic)

    async def sweep_retention(self) -> dict[str, int]:
        """Delete every row past its provider's retention, batch by batch (each batch its own
        short statement), never a row in ``processing`` with a live lease. On a partitioned
        store, past its row retention (``row_retention``): the rows whose partition the drop
        removes anyway are left to it."""
        batch = self._config.maintenance.retention_batch_size
        interval = self._partition_interval()
        longest = max((p.retention for p in self._config.routes), default=0.0)
        deleted: dict[str, int] = {}
        for provider in self._config.routes:
            counter = self._metrics.retention_deleted.labels(provider.key)
            older_than = row_retention(provider.retention, longest, interval)
            total = await _in_batches(
                partial(self._store.purge, provider.key, older_than, batch),
                batch, counter.inc)
            if provider.destination is None and (provider.replay_nonce is not None
                                                 or provider.guards_body_replay):
                await _in_batches(
                    partial(self._store.purge_nonces, provider.key, older_than, batch),
                    batch)
            deleted[provider.key] = total
            if total:
                log.info("retention_deleted", provider=provider.key, rows=total)
        return deleted

    def _partition_interval(self) -> float | None:
        partitioning = self._config.store.partitioning
        if self._partitions is None or partitioning is None:
            return None
        return partitioning.interval

    async def keep_partitions(self) -> None:
        """A partitioned store: make the partitions ahead, then drop those past retention
        (``PartitionUpkeep``), and set the partition gauges. A table whose partitions stayed
        locked through every try is named in a warning (``partitions_not_made``); the next
        round tries again. Row-level retention still runs (``row_retention``), for the
        providers whose retention is much shorter than the longest, and for the rows of
        partitions the drop kept back."""
        await self.make_partitions()
        await self.drop_partitions()

    async def make_partitions(self) -> None:
        if self._partitions is None:
            return
        made = await self._partitions.make_ahead()
        if made.made:
            log.info("partitions_made", count=made.made)
        if made.busy:  # busy through every try; ahead, so one round missed costs nothing
            log.warning("partitions_not_made", tables=list(made.busy), reason="locked",
                        retry_in_s=self._config.maintenance.interval)

    async def drop_partitions(self) -> None:
        if self._partitions is None:
            return
        retention = {p.key: p.retention for p in self._config.routes}
        retired = await self._partitions.retire(retention)
        for name in retired.dropped:
            log.info("partition_dropped", partition=name)
        for name, kept in retired.kept:
            if kept.worth_a_warning:  # the reason's text as docs/operations.md lists it
                log.warning("partition_kept", partition=name, reason=str(kept))
        if retired.default_rows:
            log.warning("partition_default_used", rows=retired.default_rows)
        self._metrics.partitions_dropped.inc(len(retired.dropped))
        self._metrics.partition_default_rows.set(retired.default_rows)
        for table, count, last_bound in retired.extent:
            self._metrics.partitions.labels(table).set(count)
            self._metrics.partitions_last_bound.labels(table).set(last_bound)

    async def refresh_stuck(self) -> dict[str, int]:
        counts = await self._store.stuck_counts()
        for provider in self._config.routes:
            self._metrics.stuck.labels(provider.key).set(counts.get(provider.key, 0))
        return counts

    async def refresh_queue(self) -> None:
        """The queue gauges of queue-mode providers (waiting, oldest age, dead), over all
        replicas: one aggregate over the queue table."""
        if not self._queued:
            return
        stats = await self._store.queue_stats()
        for key in self._queued:
            found = stats.get(key, QueueStats(0, 0, 0.0))
            self._metrics.queue_depth.labels(key).set(found.pending)
            self._metrics.queue_oldest.labels(key).set(found.oldest_pending_seconds)
            self._metrics.queue_dead.labels(key).set(found.dead)
        if self._dead_letters is not None:  # notify.dead_letters: a threshold reached
            dead = {key: stats[key].dead for key in self._queued if key in stats}
            for notice in self._dead_letters.observe(dead):
                self._notices.notice(notice)

    async def refresh_queue_on_scrape(self) -> None:
        """Before /metrics renders: the queue gauges as the store has them now (or at most
        ``SCRAPE_REFRESH_EVERY`` ago), if it answers within ``SCRAPE_REFRESH_WAIT``; else the
        gauges keep their last values and a warning says why. Never raises."""
        if not self._queued:
            return
        if self._scrape_refresh is None:
            started = time.monotonic()
            if started - self._scrape_refreshed_at < SCRAPE_REFRESH_EVERY:
                return
            self._scrape_refreshed_at = started
            self._scrape_refresh = asyncio.create_task(self._refresh_for_scrape(),
                                                       name="queue-gauges")
        # asyncio.wait never cancels the refresh: a scrape that gives up leaves it running.
        done, _ = await asyncio.wait([self._scrape_refresh], timeout=SCRAPE_REFRESH_WAIT)
        if not done:
            log.warning("queue_gauges_stale", reason="store_slow",
                        waited_s=SCRAPE_REFRESH_WAIT)

    async def _refresh_for_scrape(self) -> None:
        try:
            await self.refresh_queue()
        except StoreError as exc:
            log.warning("queue_gauges_stale", reason="store_error", error=str(exc))
        except Exception:  # a bug must not break /metrics
            log.exception("queue_gauges_refresh_crashed")
        finally:
            self._scrape_refresh = None

    def reload_secrets(self) -> tuple[str, ...]:
        result = self._keyring.reload()
        for provider in result.changed:
            self._metrics.secret_reloads.labels(provider, "applied").inc()
            log.info("secrets_reloaded", provider=provider)
        for error in result.errors:
            # As ``changed`` names them: a provider key, or the key path of forward-signing
            # secrets (the top level's, or a provider upstream's own).
            where = error.partition("[")[0]
            provider = (where if where.endswith(SIGNING)
                        else error.split(".")[1] if error.startswith("providers.") else "")
            self._metrics.secret_reloads.labels(provider, "error").inc()
            log.error("secrets_reload_failed", error=error)
        return result.changed

    async def run_store_upkeep(self) -> None:
        """Forever: retention and the stuck-row gauge, every ``maintenance.interval``."""
        while True:
            await self.upkeep_once()
            await asyncio.sleep(self._config.maintenance.interval)

    async def upkeep_once(self) -> None:
        """One round of the store's upkeep. Each step on its own: one that fails is logged and
        counted (``webhook_maintenance_errors_total{step}``), and the others still run, so a
        partition that cannot be made stops neither retention nor the gauges."""
        steps: tuple[tuple[str, Callable[[], Awaitable[object]]], ...] = (
            ("make_partitions", self.make_partitions),
            ("drop_partitions", self.drop_partitions), ("retention", self.sweep_retention),
            ("stuck", self.refresh_stuck), ("queue", self.refresh_queue))
        for step, run in steps:
            try:
                await run()
            except StoreError as exc:
                self._metrics.maintenance_errors.labels(step).inc()
                log.warning("maintenance_failed", step=step, error=str(exc))
            except Exception:  # a bug must not end retention for the life of the process
                self._metrics.maintenance_errors.labels(step).inc()
                log.exception("maintenance_crashed", step=step)

    async def run_secret_reloads(self) -> None:
        """Forever: re-read secret files every ``maintenance.secrets_reload_interval``."""
        while True:
            await asyncio.sleep(self._config.maintenance.secrets_reload_interval)
            try:
                await asyncio.to_thread(self.reload_secrets)
            except Exception:  # keep watching: the next rotation must still be picked up
                log.exception("secrets_reload_crashed")


def row_retention(retention: float, longest: float, interval: float | None) -> float:
    """How old (seconds) a provider's rows must be before row-level retention deletes them.

    Unpartitioned: its retention. Partitioned (``interval`` seconds a partition; ``longest``
    the longest retention configured): a partition is dropped once its upper bound is past
    the longest retention of its providers, so a row is dropped at most ``interval +
    longest`` after its receipt. Deleting it one by one before that only doubles the work
    (WAL, dead tuples, autovacuum) for storage the drop frees soon anyway, so:

    - a retention within one interval of the longest: rows stay until their partition goes
      (deduplication only gets longer). Row deletes still reach rows older than ``longest +
      2 * interval``: only partitions the drop kept back (busy, a provider no longer
      configured) hold such rows, their drop horizon an interval past at least;
    - a retention shorter than the longest by more than one interval: its retention, as
      unpartitioned; else its rows would stay (longest + interval) / retention times as long
      as configured, and its storage grow with them.
    """
    if interval is None or longest - retention > interval:
        return retention
    return longest + 2 * interval


async def _in_batches(delete: Callable[[], Awaitable[int]], batch: int,
                      on_batch: Callable[[int], object] = lambda _: None) -> int:
    """Run ``delete`` (one short statement deleting at most ``batch`` rows) until a batch
    comes back short; returns the total."""
    total = 0
    while True:
        count = await delete()
        on_batch(count)
        total += count
        if count < batch:
            return total
        await asyncio.sleep(0)  # let deliveries in between batches

