"""The queue gauges on /metrics show the queue as it is at the scrape, not as the maintenance
loop last saw it: a real proxy process in queue mode, its app down and maintenance.interval an
hour, so that only the scrape itself can have counted what was queued."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.acceptance.test_queue_mode import accepted, queued
from tests.support import stripe_event

EVENTS = 20


async def test_a_scrape_counts_the_events_queued_since_the_last_maintenance_run(
        tmp_path: Path) -> None:
    async with queued("sqlite", tmp_path, None) as dep:
        # Maintenance runs once as the process starts (before it listens), then not for an hour.
        dep.config["maintenance"] = {"interval": "1h"}
        await dep.start(1)
        ids = [f"evt_gauge_{i:02d}" for i in range(EVENTS)]
        answers = await asyncio.gather(*(dep.send(0, stripe_event(e)) for e in ids))
        assert all(accepted(a, e) for a, e in zip(answers, ids, strict=True))

        # The app is down: all twenty wait. One scrape, no waiting.
        assert await dep.metric("webhook_queue_depth", proc=0, provider="stripe") == EVENTS
        assert await dep.metric("webhook_queue_oldest_age_seconds", proc=0,
                                provider="stripe") > 0
        assert await dep.metric("webhook_queue_dead", proc=0, provider="stripe") == 0
