"""The known-answer cache (``answer_cache``) over real processes: one proxy that remembers answers
and one that does not (``answer_cache: 0``), on one PostgreSQL database, must answer every
delivery alike — before retention, after it, and after every operator verb. The memory may
save a round trip, never change an answer.

Retention is short here (2 s) and runs in each process every 200 ms, as the maintenance loop
does; the tests wait on the database (a row's age, a row gone), never for a fixed time."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import asyncpg
import pytest
from aiohttp import web

from sidecar.core.events import EventState, Settlement
from tests.acceptance.conftest import Deployment, run_cli
from tests.acceptance.test_body_replay import VECTOR_BODY, github
from tests.acceptance.test_queue_operations import accept, failure, real_store, tried
from tests.support import ProxyProcess, Seen, post, stripe_event, stripe_headers, write_config

RETENTION = 2.0  # seconds; the lease (1.5 s) must be shorter, the upstream timeout (1 s) too
STRIPE = "/webhooks/stripe"
GITHUB = "/webhooks/github"


@dataclass(frozen=True)
class Answered:
    """What a provider sees of one delivery."""

    status: int
    replay: bool
    body: bytes

    @property
    def reason(self) -> str | None:
        return json.loads(self.body).get("reason") if self.status >= 400 else None


def short_lived(config: dict[str, Any], **top: Any) -> dict[str, Any]:
    """``config`` with a 2 s retention for stripe and github, run every 200 ms."""
    config = copy.deepcopy(config)
    config["upstream"]["timeout"] = "1s"
    for key in ("stripe", "github"):
        config["providers"][key].update(lease="1500ms", inflight_wait="1s",
                                        retention=f"{RETENTION:g}s")
    config["maintenance"] = {"interval": "200ms"}
    config.update(top)
    return config


async def start_pair(dep: Deployment, config: dict[str, Any] | None = None,
                     **cached_top: Any) -> tuple[ProxyProcess, ProxyProcess]:
    """Two proxies on ``dep``'s database: one with the default ``answer_cache``, one without."""
    config = config if config is not None else short_lived(dep.config)
    cached = write_config(dep.tmp, {**config, **cached_top}, "cached.yaml")
    bare = write_config(dep.tmp, {**config, "answer_cache": 0}, "bare.yaml")
    procs = await asyncio.gather(ProxyProcess(cached).start(), ProxyProcess(bare).start())
    dep.procs = list(procs)
    return procs[0], procs[1]


def numbered(dep: Deployment) -> Callable[[Seen], Awaitable[web.StreamResponse]]:
    """The app's answers carry how many requests it had seen: a replay shows which forward it
    replays."""
    async def answer(seen: Seen) -> web.StreamResponse:
        return web.json_response({"event": seen.event_id, "attempt": seen.attempt,
                                  "forward": len(dep.stub.seen)})
    return answer


async def deliver(client: aiohttp.ClientSession, url: str, body: bytes,
                  headers: dict[str, str]) -> Answered:
    status, answer_headers, payload = await post(client, url, body, headers)
    return Answered(status, answer_headers.get("X-Webhook-Sidecar-Replay") == "true", payload)


async def stripe(dep: Deployment, proc: ProxyProcess, event_id: str,
                 path: str = STRIPE) -> Answered:
    assert dep.client is not None
    body = stripe_event(event_id)
    return await deliver(dep.client, proc.url + path, body, stripe_headers(body))


async def database_says(dsn: str, query: str, *args: object) -> Any:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval(query, *args)
    finally:
        await conn.close()


async def event_age(dsn: str, provider: str, event_id: str) -> float | None:
    """The row's age by the database clock, or None once retention deleted it."""
    age = await database_says(
        dsn, "SELECT extract(epoch FROM clock_timestamp() - received_at)::float8"
             " FROM webhook_event WHERE provider = $1 AND event_id = $2", provider, event_id)
    return None if age is None else float(age)


async def nonces(dsn: str, provider: str) -> int:
    return int(await database_says(
        dsn, "SELECT count(*) FROM webhook_nonce WHERE provider = $1", provider))


async def until(condition: Callable[[], Awaitable[bool]], what: str,
                timeout: float = 10.0) -> None:
    """A bounded poll of the database, not a sleep used as a barrier."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await condition():
        if loop.time() > deadline:
            pytest.fail(f"not within {timeout}s: {what}")
        await asyncio.sleep(0.05)


async def purged(dsn: str, provider: str, *event_ids: str) -> None:
    async def gone() -> bool:
        return all([await event_age(dsn, provider, e) is None for e in event_ids])
    await until(gone, f"retention deletes {provider} {event_ids}")


async def test_with_and_without_the_cache_processes_answer_alike_before_and_after_retention(
    pg_deployment: Deployment,
) -> None:
    """Each process forwards one event; both answer both events' duplicates from the rows.
    Duplicates keep arriving at the cached process until just before retention: hits do not
    keep its entries alive. Once retention deleted the rows, each event is new again on both
    processes: forwarded as attempt 1 (the cached process used to go on replaying)."""
    dep = pg_deployment
    dep.stub.behaviour = numbered(dep)
    cached, bare = await start_pair(dep)
    first = {"evt_a": await stripe(dep, cached, "evt_a"), "evt_b": await stripe(dep, bare, "evt_b")}
    assert [(a.status, a.replay) for a in first.values()] == [(200, False)] * 2

    for proc in (cached, bare, cached):
        for event_id, answered in first.items():
            assert await stripe(dep, proc, event_id) == Answered(200, True, answered.body)

    async def hits_until_nearly_past_retention() -> bool:
        for event_id, answered in first.items():
            assert await stripe(dep, cached, event_id) == Answered(200, True, answered.body)
        age = await event_age(dep.store_url, "stripe", "evt_a")
        return age is None or age > RETENTION - 0.4

    await until(hits_until_nearly_past_retention, "duplicates until just before retention")
    await purged(dep.store_url, "stripe", *first)

    # After retention: the cached process forwards evt_a, the bare one evt_b, as new events.
    again = {"evt_a": await stripe(dep, cached, "evt_a"), "evt_b": await stripe(dep, bare, "evt_b")}
    assert [(a.status, a.replay) for a in again.values()] == [(200, False)] * 2, \
        "after retention each process forwards the event again, as attempt 1"
    assert dep.stub.attempts("evt_a") == dep.stub.attempts("evt_b") == [1, 1]
    for proc in (bare, cached):  # and both answer the new rows' duplicates alike
        for event_id, answered in again.items():
            assert await stripe(dep, proc, event_id) == Answered(200, True, answered.body)


async def test_a_body_binding_learned_late_is_forgotten_when_the_store_forgets_it(
    pg_deployment: Deployment,
) -> None:
    """The replay guard's binding of a GitHub body to its delivery id: made by the bare process,
    learned a second later by the cached one. When retention deletes it, the same body under a
    fresh delivery id is a new event on both (the cached process used to refuse it as a replayed
    body for a whole retention after it had learned the binding)."""
    dep = pg_deployment
    dep.stub.behaviour = numbered(dep)
    cached, bare = await start_pair(dep)
    assert dep.client is not None

    async def send(proc: ProxyProcess, delivery: str) -> Answered:
        assert dep.client is not None
        return await deliver(dep.client, proc.url + GITHUB, VECTOR_BODY, github(delivery))

    first = await send(bare, "d-1")
    assert (first.status, first.replay) == (200, False)

    async def a_second_old() -> bool:
        age = await event_age(dep.store_url, "github", "d-1")
        return age is not None and age >= 1.0

    await until(a_second_old, "the binding is a second old")
    assert await send(cached, "d-1") == Answered(200, True, first.body)  # learns the binding
    assert (await send(cached, "d-0")).reason == "replayed_body"  # and refuses from it

    await purged(dep.store_url, "github", "d-1")

    async def bindings_purged() -> bool:
        return await nonces(dep.store_url, "github") == 0

    await until(bindings_purged, "retention deletes the binding")
    fresh = await send(cached, "d-2")
    assert (fresh.status, fresh.replay) == (200, False), \
        f"the body under a fresh id after retention is a new event, got {fresh}"
    assert await send(bare, "d-2") == Answered(200, True, fresh.body)
    for proc in (bare, cached):
        assert (await send(proc, "d-3")).reason == "replayed_body"
    assert [s.event_id for s in dep.stub.seen] == ["d-1", "d-2"]


# -- operator verbs: what they can do to a fact some process remembers --------------------------

ORDERS = "/webhooks/orders"  # forward mode, payloads kept (re-drive); stripe is in queue mode


def verbs_config(dep: Deployment) -> dict[str, Any]:
    config = copy.deepcopy(dep.config)
    # A forward the app holds while a CLI command starts must not time out on a loaded machine.
    config["upstream"]["timeout"] = "30s"
    for provider in config["providers"].values():
        provider["lease"] = "60s"  # a lease exceeds the upstream timeout
    config["providers"]["orders"] = {**config["providers"]["stripe"], "path": ORDERS,
                                     "store_payload": True}
    config["providers"]["stripe"].update(mode="queue", queue={"poll_interval": "200ms"})
    return config


async def probe(procs: tuple[ProxyProcess, ...], path: str, event_id: str,
                times: int = 6) -> list[Answered]:
    """One event's redelivery, ``times`` to each proxy, each on a connection of its own (so
    that the kernel spreads them over a proxy's workers)."""
    body = stripe_event(event_id)
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=connector) as client:
        return [await deliver(client, proc.url + path, body, stripe_headers(body))
                for proc in procs for _ in range(times)]


async def cli(config: str, *args: str) -> tuple[int, str]:
    code, out, err = await run_cli("events", *args, "--config", config)
    return code, out + err


async def admin(client: aiohttp.ClientSession, proc: ProxyProcess, path: str) -> int:
    async with client.post(proc.admin_url + path) as resp:
        await resp.read()
        return resp.status


async def test_after_every_operator_verb_every_process_answers_as_the_store_does(
    pg_deployment: Deployment,
) -> None:
    """A proxy with ``workers: 2`` (two memories) and one without a memory, on one database.
    Every operator verb (release, forced release, re-drive, bulk re-drive; CLI and admin API)
    is run on events the processes have answered, and every process then answers each event's
    redelivery the same, as its row now says. Release and re-drive refuse done events, so a
    remembered answer stays true; what they do act on (failed, in-flight, dead rows) is never
    remembered as done — a forced release's superseded attempt included — and queue mode's
    "accepted" holds through a re-drive."""
    dep = pg_deployment
    config = verbs_config(dep)
    async with real_store(dep) as store:  # dead events, as a delivery worker leaves them
        for event_id in ("q_dead", "q_bulk_1", "q_bulk_2"):
            await accept(store, event_id)
            await tried(store, event_id, Settlement(EventState.DEAD, failure(500)))
    first_try_fails = {"o_redrive_cli", "o_redrive_api", "o_released"}
    first_held = asyncio.Event()

    async def app(seen: Seen) -> web.StreamResponse:
        if seen.event_id == "o_forced" and seen.attempt == 1:
            await first_held.wait()  # released by force while at the app
        status = 500 if seen.event_id in first_try_fails and seen.attempt == 1 else 200
        return web.json_response({"event": seen.event_id, "attempt": seen.attempt},
                                 status=status)

    dep.stub.behaviour = app
    grouped, bare = await start_pair(dep, config, workers=2)
    procs = (grouped, bare)
    path = str(dep.tmp / "bare.yaml")
    assert dep.client is not None

    def alike(answers: list[Answered], expected: Answered) -> None:
        assert set(answers) == {expected}, answers

    def body(event_id: str, attempt: int) -> bytes:
        return json.dumps({"event": event_id, "attempt": attempt}).encode()

    # A done event: release and re-drive refuse it (CLI and API, forced or not).
    assert (await stripe(dep, grouped, "o_done", ORDERS)).status == 200
    alike(await probe(procs, ORDERS, "o_done"), Answered(200, True, body("o_done", 1)))
    for verb in ("release", "redrive"):
        code, out = await cli(path, verb, "orders", "o_done")
        assert code == 1 and "done" in out, out
    for verb in ("release", "release?force=true", "redrive"):
        assert await admin(dep.client, grouped, f"/admin/events/orders/o_done/{verb}") == 409
    alike(await probe(procs, ORDERS, "o_done"), Answered(200, True, body("o_done", 1)))

    # Failed events re-driven (CLI, API): done as attempt 2, answered so everywhere.
    for event_id in ("o_redrive_cli", "o_redrive_api"):
        assert (await stripe(dep, grouped, event_id, ORDERS)).status == 500
    code, out = await cli(path, "redrive", "orders", "o_redrive_cli")
    assert code == 0, out
    assert await admin(dep.client, grouped, "/admin/events/orders/o_redrive_api/redrive") == 200
    for event_id in ("o_redrive_cli", "o_redrive_api"):
        alike(await probe(procs, ORDERS, event_id), Answered(200, True, body(event_id, 2)))
        assert dep.stub.attempts(event_id) == [1, 2]

    # A failed event released: the next redelivery (on whichever process) is forwarded as
    # attempt 2, and every later one replays it.
    assert (await stripe(dep, bare, "o_released", ORDERS)).status == 500
    code, out = await cli(path, "release", "orders", "o_released")
    assert code == 0, out
    answers = await probe(procs, ORDERS, "o_released")
    assert answers[0] == Answered(200, False, body("o_released", 2))
    alike(answers[1:], Answered(200, True, body("o_released", 2)))

    # An attempt at the app released by force and taken over: the taken-over attempt's answer
    # is relayed to its own delivery but never recorded, so no process remembers it.
    first = asyncio.create_task(stripe(dep, grouped, "o_forced", ORDERS))
    await dep.stub.wait_for(lambda: dep.stub.count("o_forced") == 1)
    code, out = await cli(path, "release", "--force", "orders", "o_forced")
    assert code == 0, out
    assert await stripe(dep, bare, "o_forced", ORDERS) == Answered(
        200, False, body("o_forced", 2))
    first_held.set()
    assert await first == Answered(200, False, body("o_forced", 1))
    alike(await probe(procs, ORDERS, "o_forced"), Answered(200, True, body("o_forced", 2)))

    # Queue mode: dead events re-driven one by one (CLI) and in bulk (API) stay "accepted".
    queued = {event_id: Answered(200, True, json.dumps(
        {"accepted": True, "event_id": event_id}).encode())
        for event_id in ("q_dead", "q_bulk_1", "q_bulk_2")}
    for event_id, accepted in queued.items():
        alike(await probe(procs, STRIPE, event_id), accepted)
    code, out = await cli(path, "redrive", "stripe", "q_dead")
    assert code == 0, out
    assert await admin(dep.client, grouped, "/admin/queue/stripe/redrive-dead") == 200
    await dep.stub.wait_for(lambda: all(dep.stub.count(e) == 1 for e in queued))

    async def delivered() -> bool:
        return all([(await dep.rows.one("stripe", e) or {}).get("state") == "done"
                    for e in queued])

    await until(delivered, "the re-driven events are delivered and recorded")
    for event_id, accepted in queued.items():
        alike(await probe(procs, STRIPE, event_id), accepted)

