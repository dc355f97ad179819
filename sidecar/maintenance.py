"""Background upkeep in every proxy process: retention, the stuck-row and queue gauges, secret
reloads.

Several replicas may run it at once: retention deletes in small batches that skip locked rows,
and every step is safe to repeat.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from functools import partial

from sidecar.config.keyring import SIGNING, Keyring
from sidecar.config.model import Config, Mode
from sidecar.core.errors import StoreError
from sidecar.core.events import QueueStats
from sidecar.core.ports import Store
from sidecar.obs.logs import get_logger
from sidecar.obs.metrics import Metrics

log = get_logger("sidecar.maintenance")


class Maintenance:
    def __init__(self, config: Config, store: Store, metrics: Metrics, keyring: Keyring) -> None:
        self._config = config
        self._store = store
        self._metrics = metrics
        self._keyring = keyring

    async def sweep_retention(self) -> dict[str, int]:
        """Delete every row past its provider's retention, batch by batch (each batch its own
        short statement), never a row in ``processing`` with a live lease."""
        batch = self._config.maintenance.retention_batch_size
        deleted: dict[str, int] = {}
        for provider in self._config.providers:
            counter = self._metrics.retention_deleted.labels(provider.key)
            total = await _in_batches(
                partial(self._store.purge, provider.key, provider.retention, batch),
                batch, counter.inc)
            if provider.replay_nonce is not None or provider.guards_body_replay:
                await _in_batches(
                    partial(self._store.purge_nonces, provider.key, provider.retention, batch),
                    batch)
            deleted[provider.key] = total
            if total:
                log.info("retention_deleted", provider=provider.key, rows=total)
        return deleted

    async def refresh_stuck(self) -> dict[str, int]:
        counts = await self._store.stuck_counts()
        for provider in self._config.providers:
            self._metrics.stuck.labels(provider.key).set(counts.get(provider.key, 0))
        return counts

    async def refresh_queue(self) -> None:
        """The queue gauges of queue-mode providers (waiting, oldest age, dead), over all
        replicas: one aggregate over the queue table."""
        queued = [p.key for p in self._config.providers if p.mode is Mode.QUEUE]
        if not queued:
            return
        stats = await self._store.queue_stats()
        for key in queued:
            found = stats.get(key, QueueStats(0, 0, 0.0))
            self._metrics.queue_depth.labels(key).set(found.pending)
            self._metrics.queue_oldest.labels(key).set(found.oldest_pending_seconds)
            self._metrics.queue_dead.labels(key).set(found.dead)

    def reload_secrets(self) -> tuple[str, ...]:
        result = self._keyring.reload()
        for provider in result.changed:
            self._metrics.secret_reloads.labels(provider, "applied").inc()
            log.info("secrets_reloaded", provider=provider)
        for error in result.errors:
            provider = (error.split(".")[1] if error.startswith("providers.")
                        else SIGNING if error.startswith(SIGNING) else "")
            self._metrics.secret_reloads.labels(provider, "error").inc()
            log.error("secrets_reload_failed", error=error)
        return result.changed

    async def run_store_upkeep(self) -> None:
        """Forever: retention and the stuck-row gauge, every ``maintenance.interval``."""
        while True:
            try:
                await self.sweep_retention()
                await self.refresh_stuck()
                await self.refresh_queue()
            except StoreError as exc:
                self._metrics.maintenance_errors.inc()
                log.warning("maintenance_failed", error=str(exc))
            except Exception:  # a bug must not end retention for the life of the process
                self._metrics.maintenance_errors.inc()
                log.exception("maintenance_crashed")
            await asyncio.sleep(self._config.maintenance.interval)

    async def run_secret_reloads(self) -> None:
        """Forever: re-read secret files every ``maintenance.secrets_reload_interval``."""
        while True:
            await asyncio.sleep(self._config.maintenance.secrets_reload_interval)
            try:
                await asyncio.to_thread(self.reload_secrets)
            except Exception:  # keep watching: the next rotation must still be picked up
                log.exception("secrets_reload_crashed")


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

