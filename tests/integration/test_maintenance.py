"""Retention and the stuck-row gauge, on real SQLite and real PostgreSQL."""

from __future__ import annotations

import hashlib
from pathlib import Path

from prometheus_client import CollectorRegistry

from sidecar.config.keyring import Keyring
from sidecar.config.loader import parse_config
from sidecar.core.bodyreplay import guard_key, ids_digest
from sidecar.core.events import AttemptResult, EventState, Outcome, RecordedResponse
from sidecar.core.ports import Store
from sidecar.obs.metrics import Metrics
from sidecar.ops.maintenance import Maintenance
from tests.backdoor import Backdoor
from tests.support import base_config

BODY = hashlib.sha256(b"{}").digest()
DONE = AttemptResult(EventState.DONE, Outcome.RESPONSE, RecordedResponse(200, (), b""), 1.0)


def maintenance(store: Store, batch: int, tmp: Path) -> tuple[Maintenance, Metrics]:
    data = base_config("http://127.0.0.1:9", f"sqlite:///{tmp / 'unused.db'}")
    data["maintenance"] = {"retention_batch_size": batch}
    data["providers"]["stripe"]["retention"] = "1h"
    config = parse_config(data, env={})
    metrics = Metrics(CollectorRegistry())
    return Maintenance(config, store, metrics, Keyring(config.providers)), metrics


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return value or 0.0


async def test_retention_deletes_exactly_the_expired_rows_in_batches(
    store: Store, backdoor: Backdoor, tmp_path: Path
) -> None:
    upkeep, metrics = maintenance(store, batch=2, tmp=tmp_path)
    expired = [f"old_{i}" for i in range(5)]
    for event_id in [*expired, "fresh", "old_live"]:
        await store.claim("stripe", event_id, BODY, 30.0, "o")
        if event_id != "old_live":
            assert await store.complete("stripe", event_id, 1, DONE)
    for event_id in [*expired, "old_live"]:
        await backdoor.backdate("stripe", event_id, 2 * 3600)  # retention is 1h
    await store.claim("github", "old_gh", BODY, 30.0, "o")
    await backdoor.backdate("github", "old_gh", 2 * 3600)  # github keeps its preset's 30d

    deleted = await upkeep.sweep_retention()

    assert deleted == {"stripe": 5, "github": 0, "slack": 0}
    left = {r.event_id for r in await store.list_events()}
    assert left == {"fresh", "old_live", "old_gh"}  # a live processing row is never deleted
    assert sample(metrics, "webhook_retention_deleted_total", provider="stripe") == 5
    assert await upkeep.sweep_retention() == {"stripe": 0, "github": 0, "slack": 0}


async def test_stuck_gauge_counts_expired_processing_rows(store: Store, tmp_path: Path) -> None:
    upkeep, metrics = maintenance(store, batch=10, tmp=tmp_path)
    await store.claim("stripe", "crashed", BODY, 0, "o")
    await store.claim("stripe", "working", BODY, 30.0, "o")
    assert await upkeep.refresh_stuck() == {"stripe": 1}
    assert sample(metrics, "webhook_events_stuck", provider="stripe") == 1
    assert sample(metrics, "webhook_events_stuck", provider="github") == 0


async def test_secret_files_are_reloaded_when_they_change(tmp_path: Path) -> None:
    secret = tmp_path / "stripe-secret"
    secret.write_text("whsec_old\n")
    data = base_config("http://127.0.0.1:9", f"sqlite:///{tmp_path / 'x.db'}")
    data["providers"]["stripe"]["secrets"] = [{"file": str(secret)}, "whsec_inline"]
    config = parse_config(data, env={})
    keyring = Keyring(config.providers)
    assert keyring.key_bytes("stripe") == (b"whsec_old", b"whsec_inline")
    assert keyring.reload().changed == ()

    secret.write_text("whsec_new\n")
    assert keyring.reload().changed == ("stripe",)
    assert keyring.key_bytes("stripe") == (b"whsec_new", b"whsec_inline")

    secret.write_text("")  # a half-written file must not wipe the keys
    result = keyring.reload()
    assert result.changed == () and "is empty" in result.errors[0]
    assert keyring.key_bytes("stripe") == (b"whsec_new", b"whsec_inline")

    secret.write_bytes(b"\xff\xfe not text")  # nor a file that is not text
    result = keyring.reload()
    assert result.changed == () and "not UTF-8" in result.errors[0]
    secret.write_text("whsec_newer\n")  # and the next good write is still picked up
    assert keyring.reload().changed == ("stripe",)


async def test_retention_forgets_bodies_bound_by_the_replay_guard(
    store: Store, backdoor: Backdoor, tmp_path: Path
) -> None:
    """GitHub's event id is unsigned, so its bodies are bound to their first id
    (``core.bodyreplay``); retention deletes those bindings with the provider's rows."""
    data = base_config("http://127.0.0.1:9", f"sqlite:///{tmp_path / 'unused.db'}")
    data["providers"]["github"]["retention"] = "1h"
    config = parse_config(data, env={})
    assert config.provider("github").guards_body_replay  # type: ignore[union-attr]
    upkeep = Maintenance(config, store, Metrics(CollectorRegistry()), Keyring(config.providers))
    old, fresh = guard_key(hashlib.sha256(b"old").digest()), guard_key(BODY)
    first, other = ids_digest(["delivery-1"]), ids_digest(["delivery-2"])
    assert (await store.bind_nonce("github", old, first)).digest == first
    await backdoor.backdate_nonces("github", 2 * 3600)
    assert (await store.bind_nonce("github", fresh, first)).digest == first
    await upkeep.sweep_retention()
    assert (await store.bind_nonce("github", old, other)).digest == other  # forgotten
    assert (await store.bind_nonce("github", fresh, other)).digest == first  # kept
