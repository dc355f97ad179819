"""Coalesced writes end to end: two proxy processes on one PostgreSQL database, 200 deliveries
of 20 events arriving at once (ten copies of each, spread over both processes and many
connections). The claims and result writes go out in batches, and still every event reaches
the app exactly once, every copy is answered 2xx, and every row ends done with attempt 1."""

from __future__ import annotations

import asyncio
import random

import aiohttp

from tests.acceptance.conftest import Deployment
from tests.support import post, stripe_event, stripe_headers

STRIPE = "/webhooks/stripe"


async def test_200_concurrent_deliveries_of_20_events_reach_the_app_once_each(
        pg_deployment: Deployment) -> None:
    dep = pg_deployment
    await dep.start(2)
    ids = [f"evt_batch_{i:02d}" for i in range(20)]
    copies = [(event_id, i % 2) for event_id in ids for i in range(10)]
    random.Random(7).shuffle(copies)
    bodies = {event_id: stripe_event(event_id) for event_id in ids}
    dep.stub.hold.clear()  # every forward waits at the app until all 200 are in flight
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    async with aiohttp.ClientSession(connector=connector) as client:
        sends = [asyncio.create_task(post(client, dep.url(proc, STRIPE), bodies[event_id],
                                          stripe_headers(bodies[event_id])))
                 for event_id, proc in copies]
        await dep.stub.wait_for(lambda: dep.stub.count() == len(ids))
        dep.stub.hold.set()
        answers = await asyncio.gather(*sends)
    assert all(200 <= status < 300 for status, _, _ in answers), sorted(
        {status for status, _, _ in answers})
    assert sorted(s.event_id for s in dep.stub.seen) == ids  # each exactly once
    rows = await dep.rows.all()
    assert sorted((r["event_id"], r["state"], r["attempt"]) for r in rows) == [
        (event_id, "done", 1) for event_id in ids]
