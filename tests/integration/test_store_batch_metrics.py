"""How coalesced writes went out, as metrics: each store statement of a claim, result write or
nonce bind is observed in ``webhook_store_batch_size{verb}`` with the calls it carried, and the
calls that went alone are counted in ``webhook_store_singles_total{verb}``; on real PostgreSQL
and SQLite, through the store's observer (``StoreLog`` with ``Metrics``), as the proxy wires it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from sidecar.core.events import AttemptResult, EventState, Outcome, RecordedResponse
from sidecar.obs.metrics import Metrics
from sidecar.obs.storelog import StoreLog
from sidecar.store.postgres import PostgresStore
from sidecar.store.sqlite import SQLiteStore

BODY = b"\x03" * 32
DONE = AttemptResult(EventState.DONE, Outcome.RESPONSE,
                     RecordedResponse(200, (("Content-Type", "application/json"),), b"{}"), 3.0)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def observed(request: pytest.FixtureRequest, tmp_path: Path,
                   ) -> AsyncIterator[tuple[PostgresStore | SQLiteStore, Metrics]]:
    """A store reporting to its own ``Metrics``."""
    metrics = Metrics()
    store: PostgresStore | SQLiteStore
    if request.param == "sqlite":
        store = await SQLiteStore.open(tmp_path / "events.db", observer=StoreLog(metrics))
    else:
        dsn = request.getfixturevalue("pg_dsn")
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute("TRUNCATE webhook_queue, webhook_event")
        finally:
            await conn.close()
        store = await PostgresStore.connect(dsn, min_size=2, max_size=8,
                                            observer=StoreLog(metrics))
    try:
        yield store, metrics
    finally:
        await store.close()


def sizes(metrics: Metrics, verb: str) -> tuple[float, float, float]:
    """(statements, calls they carried, calls that went alone) of ``verb``."""
    def value(name: str) -> float:
        return metrics.registry.get_sample_value(name, {"verb": verb}) or 0.0

    return (value("webhook_store_batch_size_count"), value("webhook_store_batch_size_sum"),
            value("webhook_store_singles_total"))


async def test_concurrent_result_writes_are_observed_as_statements_whose_sizes_add_up(
    observed: tuple[PostgresStore | SQLiteStore, Metrics],
) -> None:
    store, metrics = observed
    ids = [f"evt_{i}" for i in range(40)]
    for event_id in ids:  # one at a time: each claim goes alone
        assert (await store.claim("stripe", event_id, BODY, 30.0, "p")).won
    assert sizes(metrics, "claim") == (40, 40, 40)

    # The first goes alone, the others wait for it and go out together.
    written = await asyncio.gather(*(store.complete("stripe", event_id, 1, DONE)
                                     for event_id in ids))
    assert all(written)
    statements, calls, singles = sizes(metrics, "complete")
    coalescer = store._completes
    assert calls == 40, "every result write is in exactly one statement"
    assert statements == coalescer.singles + coalescer.batches < 40, "some went together"
    assert singles == coalescer.singles >= 1
    assert calls - singles == coalescer.batched
    # A statement of 2 or more calls is in no bucket below 2.
    le_1 = metrics.registry.get_sample_value("webhook_store_batch_size_bucket",
                                             {"verb": "complete", "le": "1.0"})
    assert le_1 == singles
    assert sizes(metrics, "bind_nonce") == (0, 0, 0)


async def test_without_coalescing_every_call_is_a_single(tmp_path: Path) -> None:
    metrics = Metrics()
    store = await SQLiteStore.open(tmp_path / "events.db", write_batch=1,
                                   observer=StoreLog(metrics))
    try:
        claims = await asyncio.gather(*(store.claim("stripe", f"evt_{i}", BODY, 30.0, "p")
                                        for i in range(12)))
        assert all(claim.won for claim in claims)
    finally:
        await store.close()
    assert sizes(metrics, "claim") == (12, 12, 12)
