"""One round of store upkeep: a step that fails is logged and counted by step, and the steps
after it still run (a partition that cannot be made stops neither retention nor the gauges)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from sidecar.config.keyring import Keyring
from sidecar.config.loader import parse_config
from sidecar.core.errors import StoreError
from sidecar.core.partition_retention import PartitionsMade, PartitionsRetired
from sidecar.obs.metrics import Metrics
from sidecar.ops.maintenance import Maintenance
from sidecar.store.memory import MemoryStore
from tests.support import base_config


class FailingMake:
    """Partition making that raises (a CheckViolation the keeper did not expect, say)."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.retired = 0
        self.second_round = asyncio.Event()
        self.makes = 0

    async def make_ahead(self) -> PartitionsMade:
        self.makes += 1
        if self.makes == 2:
            self.second_round.set()
        raise self.error

    async def retire(self, retention: Mapping[str, float]) -> PartitionsRetired:
        self.retired += 1
        return PartitionsRetired(extent=(("webhook_event", 4, 1.7e9),))


class CountingStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.purges = 0
        self.stuck_reads = 0

    async def purge(self, provider: str, older_than: float, batch: int) -> int:
        self.purges += 1
        return await super().purge(provider, older_than, batch)

    async def stuck_counts(self) -> dict[str, int]:
        self.stuck_reads += 1
        return await super().stuck_counts()


async def test_a_failing_step_is_counted_and_the_others_still_run() -> None:
    for error in (StoreError("partitioning failed: CheckViolationError"),
                  RuntimeError("a bug")):
        data = base_config("http://127.0.0.1:9", "postgresql://db/sidecar")
        data["store"]["partitioning"] = {"interval": "1d", "ahead": 3}
        data["maintenance"] = {"interval": 0.01}
        config = parse_config(data, env={})
        registry = CollectorRegistry()
        store = CountingStore()
        upkeep = FailingMake(error)
        maintenance = Maintenance(config, store, Metrics(registry), Keyring(config.providers),
                                  partitions=upkeep)
        with capture_logs() as logs:
            loop = asyncio.create_task(maintenance.run_store_upkeep())
            try:  # the first round, whole, and the second one begun
                await asyncio.wait_for(upkeep.second_round.wait(), 10)
            finally:
                loop.cancel()
        assert upkeep.retired >= 1 and store.purges >= 1 and store.stuck_reads >= 1
        assert registry.get_sample_value("webhook_maintenance_errors_total",
                                         {"step": "make_partitions"}) >= 1.0
        assert registry.get_sample_value("webhook_partitions", {"table": "webhook_event"}) == 4
        failed = [e for e in logs if e["event"] in ("maintenance_failed", "maintenance_crashed")]
        assert {e.get("step") for e in failed} == {"make_partitions"}
