"""Maintenance.keep_partitions with a fake PartitionUpkeep: what it logs and the partition
metrics it sets; an unpartitioned store sets none of them."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from sidecar.config.keyring import Keyring
from sidecar.config.loader import parse_config
from sidecar.core.partition_retention import KeepReason, Kept, PartitionsMade, PartitionsRetired
from sidecar.obs.metrics import Metrics
from sidecar.ops.maintenance import Maintenance
from sidecar.store.memory import MemoryStore
from tests.support import base_config

LAST_BOUND = "webhook_partitions_last_bound_timestamp_seconds"
PARTITION_SERIES = ("webhook_partitions", LAST_BOUND, "webhook_partition_default_rows",
                    "webhook_partitions_dropped_total")


class FakeUpkeep:
    def __init__(self, made: PartitionsMade, retired: PartitionsRetired) -> None:
        self.made, self.retired = made, retired

    async def make_ahead(self) -> PartitionsMade:
        return self.made

    async def retire(self, retention: Mapping[str, float]) -> PartitionsRetired:
        return self.retired


def _maintenance(registry: CollectorRegistry, upkeep: FakeUpkeep | None) -> Maintenance:
    data = base_config("http://127.0.0.1:9", "postgresql://db/sidecar")
    if upkeep is not None:
        data["store"]["partitioning"] = {"interval": "1d", "ahead": 3}
    config = parse_config(data, env={})
    return Maintenance(config, MemoryStore(), Metrics(registry), Keyring(config.providers),
                       partitions=upkeep)


def _sampled(registry: CollectorRegistry) -> set[str]:
    return {s.name for m in registry.collect() for s in m.samples
            if s.name in PARTITION_SERIES}


async def test_a_round_sets_the_partition_gauges_and_warns_of_tables_not_made() -> None:
    registry = CollectorRegistry()
    upkeep = FakeUpkeep(
        PartitionsMade(made=2, busy=("webhook_event",)),
        PartitionsRetired(dropped=("webhook_event_p1", "webhook_nonce_p1"), default_rows=3,
                          extent=(("webhook_event", 4, 1.7e9), ("webhook_nonce", 6, 0.0))))
    maintenance = _maintenance(registry, upkeep)
    with capture_logs() as logs:
        await maintenance.keep_partitions()
    warned = [e for e in logs if e["event"] == "partitions_not_made"]
    assert warned == [{"event": "partitions_not_made", "log_level": "warning",
                       "tables": ["webhook_event"], "reason": "locked",
                       "retry_in_s": 60.0}]
    value = registry.get_sample_value
    assert value("webhook_partitions", {"table": "webhook_event"}) == 4
    assert value("webhook_partitions", {"table": "webhook_nonce"}) == 6
    # The bound as it is (Unix time), 0 for a table with no bounded partition.
    assert value(LAST_BOUND, {"table": "webhook_event"}) == 1.7e9
    assert value(LAST_BOUND, {"table": "webhook_nonce"}) == 0.0
    assert value("webhook_partition_default_rows") == 3
    assert value("webhook_partitions_dropped_total") == 2

    upkeep.made = PartitionsMade()
    upkeep.retired = PartitionsRetired(extent=(("webhook_event", 5, 1.8e9),))
    with capture_logs() as logs:
        await maintenance.keep_partitions()
    assert not [e for e in logs if e["event"] == "partitions_not_made"]
    assert value("webhook_partitions_dropped_total") == 2  # a counter: nothing more dropped
    assert value("webhook_partition_default_rows") == 0
    assert value(LAST_BOUND, {"table": "webhook_event"}) == 1.8e9


async def test_an_unpartitioned_store_sets_no_partition_series() -> None:
    registry = CollectorRegistry()
    await _maintenance(registry, None).keep_partitions()
    # The per-table series appear once set; the unlabelled two, as every unlabelled one, at 0.
    assert _sampled(registry) == {"webhook_partition_default_rows",
                                  "webhook_partitions_dropped_total"}
    assert registry.get_sample_value("webhook_partition_default_rows") == 0
    assert registry.get_sample_value("webhook_partitions_dropped_total") == 0


async def test_a_kept_partition_is_logged_with_its_reason_unless_simply_not_due() -> None:
    """The ``reason`` field is the typed reason's text (docs/operations.md lists them); a
    partition inside its retention is met every round and is not worth a warning."""
    kept = (("p_young", Kept(KeepReason.INSIDE_RETENTION)),
            ("p_orphan", Kept(KeepReason.UNCONFIGURED_PROVIDER, "a,b")),
            ("p_lease", Kept(KeepReason.BUSY)))
    upkeep = FakeUpkeep(PartitionsMade(), PartitionsRetired(kept=kept))
    with capture_logs() as logs:
        await _maintenance(CollectorRegistry(), upkeep).keep_partitions()
    assert [(e["partition"], e["reason"], e["log_level"]) for e in logs
            if e["event"] == "partition_kept"] == [
        ("p_orphan", "unconfigured_provider:a,b", "warning"), ("p_lease", "busy", "warning")]
