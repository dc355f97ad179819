"""Fan-out under faults (``providers.<key>.destinations``): real proxy processes, several real
apps on loopback, real PostgreSQL (two processes sharing one database) and SQLite (one process).

Each destination must get each accepted event exactly as one app does in queue mode, whatever
happens to the others and to the proxies:

- a destination down for a while: the others get every event at once, each once as attempt 1;
  when it comes back it gets every event, each once; the same Idempotency-Key and provider
  header everywhere, attempt numbers counted per destination;
- order_key: one key's events reach each destination in acceptance order, one at a time, while
  another destination is held;
- SIGKILL of a proxy mid-fan-out (one event's fan-out blocked half-way in the database) and
  mid-forward: the other proxy finishes; per destination nothing is lost, and a repeat comes
  only as a higher attempt;
- two replicas racing: the same event posted to both at the same moment, many times over:
  each destination gets each event once;
- a dead destination re-driven with ``events redrive stripe.billing --dead``: delivered there,
  never a second copy elsewhere;
- the set changed in a running group (the provider's own queue paused, the proxies restarted on
  a new config): events accepted before go to the set they were accepted with, new events to
  the new set; a removed destination's events wait under its key until it is configured again;
  a queue-mode provider given destinations fans the events it accepted before out to them.

The apps are ``StubApp(listen_later=True)``: a port reserved from the start that refuses
connections until ``start()`` — an app that is down.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest
from aiohttp import web

from tests.acceptance.conftest import create_database, drop_database, run_cli
from tests.support import (
    ProxyGroup,
    ProxyProcess,
    Seen,
    StubApp,
    answer_200,
    base_config,
    post,
    stripe_event,
    stripe_headers,
)

pytestmark = pytest.mark.timeout(240)

ORDER_PATH = "$.data.object.id"
States = dict[str, tuple[str, int]]  # event id → (state, attempt) of one queue


# -- the deployment --------------------------------------------------------------------------------


@dataclass
class Group(ProxyGroup):
    """Proxies on one store, the ``stripe`` provider in queue mode fanning out to ``apps`` (one
    destination each, by name)."""

    kind: str
    store_url: str
    apps: dict[str, StubApp]
    tmp: Path
    config: dict[str, Any]
    client: aiohttp.ClientSession
    procs: list[ProxyProcess] = field(default_factory=list)

    def set_destinations(self, names: Iterable[str], **blocks: dict[str, Any]) -> None:
        """The provider's destinations: each app by name (``blocks``: keys added to one)."""
        self.config["providers"]["stripe"]["destinations"] = [
            {"name": name, "upstream": {"url": self.apps[name].url}, **blocks.get(name, {})}
            for name in names]

    async def stop(self) -> None:
        for proc in self.procs:
            assert await proc.terminate() == 0, "\n".join(proc.raw_logs[-20:])
        self.procs = []

    async def accept_all(self, ids: Sequence[str], bodies: dict[str, bytes] | None = None,
                         at_once: int = 10) -> None:
        """Every event accepted (``at_once`` in flight), spread over the processes."""
        gate = asyncio.Semaphore(at_once)

        async def one(i: int, event_id: str) -> None:
            body = stripe_event(event_id) if bodies is None else bodies[event_id]
            async with gate:
                answer = await self.send(i, body)
            assert accepted(answer, event_id), answer

        await asyncio.gather(*(one(i, e) for i, e in enumerate(ids)))

    async def queues(self) -> dict[str, States]:
        """Each queue's rows (``stripe``, ``stripe.billing``, …)."""
        found: dict[str, States] = defaultdict(dict)
        for r in await self.rows.all():
            found[r["provider"]][r["event_id"]] = (r["state"], r["attempt"])
        return found

    async def until_queues(self, wanted: Callable[[dict[str, States]], bool], timeout: float,
                           what: str) -> dict[str, States]:
        """Poll the rows (every 50 ms) until ``wanted`` holds; fail after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            queues = await self.queues()
            if wanted(queues):
                return queues
            if time.monotonic() > deadline:
                summary = {key: Counter(s for s, _ in rows.values())
                           for key, rows in queues.items()}
                raise AssertionError(f"within {timeout:g} s: {what}; states: {summary}")
            await asyncio.sleep(0.05)  # polling the database, bounded by the deadline

    def errors(self) -> list[dict[str, Any]]:
        return [e for p in self.procs for e in p.logs if e.get("level") in ("error", "critical")]


def fan_config(store_url: str, **queue: Any) -> dict[str, Any]:
    """``stripe`` alone, in queue mode, retrying fast. No top-level app: each destination names
    its own (``Group.set_destinations``)."""
    config = base_config("http://127.0.0.1:9", store_url)
    stripe = config["providers"]["stripe"]
    stripe.update({"mode": "queue",
                   "queue": {"first_retry": "200ms", "max_retry_delay": "1s",
                             "poll_interval": "100ms", **queue}})
    config["providers"] = {"stripe": stripe}
    config["maintenance"] = {"interval": "200ms"}
    return config


@contextlib.asynccontextmanager
async def fanned_out(kind: str, tmp_path: Path, admin_dsn: str | None, names: Sequence[str],
                     **queue: Any) -> AsyncIterator[Group]:
    """A deployment with one app per name (not listening yet) and ``stripe`` fanning out to
    all of them; the database migrated, no proxy started."""
    apps = {name: StubApp(listen_later=True) for name in names}
    if kind == "sqlite":
        store_url = f"sqlite:///{tmp_path / 'events.db'}"
    else:
        assert admin_dsn is not None
        store_url = await create_database(admin_dsn)
    try:
        async with aiohttp.ClientSession() as client:
            dep = Group(kind, store_url, apps, tmp_path, fan_config(store_url, **queue),
                         client)
            dep.set_destinations(names)
            if kind == "postgres":
                code, _, err = await run_cli("migrate", "--config", dep.config_path)
                assert code == 0, err
            try:
                yield dep
            finally:
                for proc in dep.procs:
                    await proc.kill()
    finally:
        for app in apps.values():
            await app.stop()
        if admin_dsn is not None:
            await drop_database(admin_dsn, store_url)


def accepted(answer: tuple[int, dict[str, str], bytes], event_id: str) -> bool:
    """A queue-mode acceptance (first or again)."""
    status, headers, body = answer
    return (status == 200 and json.loads(body) == {"accepted": True, "event_id": event_id}
            and headers.get("X-Webhook-Sidecar-Queued") == "true")


def all_in(queue: str, ids: Iterable[str], state: str) -> Callable[[dict[str, States]], bool]:
    wanted = list(ids)
    return lambda queues: all(queues[queue].get(e, ("", 0))[0] == state for e in wanted)


def every(*checks: Callable[[dict[str, States]], bool]) -> Callable[[dict[str, States]], bool]:
    return lambda queues: all(check(queues) for check in checks)


def once_each(app: StubApp, ids: Sequence[str]) -> None:
    """The app got each event exactly once, as attempt 1, and nothing else."""
    seen = Counter(s.event_id for s in app.seen)
    assert sorted(seen) == sorted(ids), sorted(set(ids) ^ set(seen))[:5]
    assert [e for e, n in seen.items() if n > 1] == []
    assert Counter(s.attempt for s in app.seen) == {1: len(seen)}


def only_later_attempts_repeat(app: StubApp, name: str) -> dict[str, list[int]]:
    """Per event, the attempts that reached the app in arrival order: each higher than the one
    before (a repeat only after an attempt whose outcome the proxy could not know). Returns
    the repeated events."""
    attempts: dict[str, list[int]] = defaultdict(list)
    for s in sorted(app.seen, key=lambda s: s.at):
        attempts[s.event_id].append(s.attempt)
    for event_id, numbers in attempts.items():
        assert all(a < b for a, b in itertools.pairwise(numbers)), (name, event_id, numbers)
    return {e: n for e, n in attempts.items() if len(n) > 1}


def order_key(seen: Seen) -> str | None:
    with contextlib.suppress(ValueError, KeyError, TypeError):
        return str(json.loads(seen.body)["data"]["object"]["id"])
    return None


async def fanned_to(dep: Group, event_id: str) -> list[str]:
    """The destinations the provider's own queue recorded it queued an event for (its fan-out's
    answer: 200, ``{"destinations": [...]}``)."""
    code, out, err = await run_cli("events", "show", "stripe", event_id, "--config",
                                   dep.config_path, "--json")
    assert code == 0, out + err
    shown = json.loads(out)
    assert (shown["state"], shown["response_status"]) == ("done", 200), shown
    names: list[str] = json.loads(shown["response_body_text"])["destinations"]
    return names


# -- a destination down for a while ----------------------------------------------------------------

DOWN_EVENTS = 60


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_destination_down_for_a_while_the_others_get_everything_at_once(
        kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    admin_dsn = request.getfixturevalue("pg_dsn") if kind == "postgres" else None
    names = ("billing", "crm", "analytics")
    async with fanned_out(kind, tmp_path, admin_dsn, names) as dep:
        billing, crm, analytics = (dep.apps[n] for n in names)

        # analytics fails the first attempt of every third event: its attempts are its own.
        async def flaky(seen: Seen) -> web.StreamResponse:
            if int(seen.event_id.rsplit("_", 1)[1]) % 3 == 0 and seen.attempt == 1:
                return web.json_response({"error": "busy"}, status=503)
            return await answer_200(seen)

        analytics.behaviour = flaky
        await billing.start()
        await analytics.start()  # crm stays down
        await dep.start(2 if kind == "postgres" else 1)
        ids = [f"evt_down_{i:03d}" for i in range(DOWN_EVENTS)]
        bodies = {e: stripe_event(e) for e in ids}
        await dep.accept_all(ids, bodies)

        # billing and analytics get everything while crm is down; crm's events wait.
        queues = await dep.until_queues(
            every(all_in("stripe", ids, "done"), all_in("stripe.billing", ids, "done"),
                  all_in("stripe.analytics", ids, "done")),
            timeout=60, what="the provider's queue fanned out, billing and analytics done")
        assert crm.seen == []
        assert {s for s, _ in queues["stripe.crm"].values()} <= {"queued", "processing"}
        assert sorted(queues["stripe.crm"]) == ids
        once_each(billing, ids)
        flaky_ids = [e for e in ids if int(e.rsplit("_", 1)[1]) % 3 == 0]
        assert sorted(e for e, n in Counter(s.event_id for s in analytics.seen).items()
                      if n > 1) == flaky_ids
        for event_id in ids:
            expected = [1, 2] if event_id in flaky_ids else [1]
            assert analytics.attempts(event_id) == expected, event_id
            assert queues["stripe.analytics"][event_id] == ("done", len(expected))
            assert queues["stripe.billing"][event_id] == ("done", 1)
            assert queues["stripe"][event_id] == ("done", 1)  # one fan-out each

        # crm comes back: every event, each once, as attempt 1 (refused connections were not
        # attempts); nothing more reaches the others.
        await crm.start()
        await dep.until_queues(all_in("stripe.crm", ids, "done"), timeout=60,
                               what="crm done after it came back")
        once_each(crm, ids)
        once_each(billing, ids)
        for name, app in dep.apps.items():
            for s in app.seen:
                assert s.body == bodies[s.event_id], name
                assert s.headers["Idempotency-Key"] == f"stripe:{s.event_id}", name
                assert s.headers["X-Webhook-Sidecar-Provider"] == "stripe", name
        assert await fanned_to(dep, ids[0]) == list(names)
        assert dep.errors() == []


# -- order_key -------------------------------------------------------------------------------------

KEYS = ("cus_a", "cus_b", "cus_c")
PER_KEY = 6


async def test_one_keys_events_reach_each_destination_in_order_while_another_is_held(
        pg_dsn: str, tmp_path: Path) -> None:
    names = ("billing", "crm")
    async with fanned_out("postgres", tmp_path, pg_dsn, names, order_key=ORDER_PATH) as dep:
        billing, crm = (dep.apps[n] for n in names)

        async def work(seen: Seen) -> web.StreamResponse:
            await asyncio.sleep(0.02)  # the app's work, not synchronisation
            return await answer_200(seen)

        billing.behaviour = crm.behaviour = work
        crm.hold.clear()  # crm is slow: its first requests wait until released
        for app in dep.apps.values():
            await app.start()
        await dep.start(2)
        sent: dict[str, list[str]] = {}

        async def send_key(key: str) -> None:
            sent[key] = []
            for n in range(PER_KEY):  # one after another: each accepted before the next
                event_id = f"evt_{key}_{n}"
                body = stripe_event(event_id, data={"object": {"id": key, "n": n}})
                assert accepted(await dep.send(n, body), event_id)
                sent[key].append(event_id)

        await asyncio.gather(*(send_key(key) for key in KEYS))
        ids = [e for key in KEYS for e in sent[key]]
        # billing gets every event while crm holds the first of each key.
        await dep.until_queues(all_in("stripe.billing", ids, "done"), timeout=30,
                               what="billing done while crm is held")
        await crm.wait_for(lambda: {order_key(s) for s in crm.seen} == set(KEYS), timeout=10,
                           what="the first event of each key at crm")
        assert len(crm.seen) == len(KEYS), [s.event_id for s in crm.seen]
        crm.hold.set()
        await dep.until_queues(all_in("stripe.crm", ids, "done"), timeout=30,
                               what="crm done after release")

        for name, app in dep.apps.items():
            by_key: dict[str | None, list[Seen]] = defaultdict(list)
            for s in sorted(app.seen, key=lambda s: s.at):
                by_key[order_key(s)].append(s)
            assert set(by_key) == set(KEYS), name
            for key in KEYS:
                got = by_key[key]
                assert [s.event_id for s in got] == sent[key], (name, key)
                assert {s.attempt for s in got} == {1}, (name, key)
                overlaps = [(a.event_id, b.event_id) for a, b in itertools.pairwise(got)
                            if a.answered is None or b.at < a.answered]
                assert overlaps == [], f"{name}/{key}: at the app at once: {overlaps}"
        assert dep.errors() == []


# -- SIGKILL mid-fan-out ---------------------------------------------------------------------------

KILL_EVENTS = 40
BLOCKED = "evt_kill_blocked"  # its fan-out is held half-way: billing queued, crm blocked

BLOCK_CRM_ROW = """
INSERT INTO webhook_event (provider, event_id, received_at, body_sha256, state, attempt,
                           updated_at)
VALUES ('stripe.crm', $1, clock_timestamp(), '\\x00'::bytea, 'queued', 0, clock_timestamp())
"""
# The sessions waiting for this one's locks (the statement text in pg_stat_activity is cut at
# track_activity_query_size, before a batched enqueue's INSERT).
WAITING = """
SELECT count(*) FROM pg_stat_activity
 WHERE datname = current_database() AND pg_backend_pid() = ANY(pg_blocking_pids(pid))
"""


async def test_sigkill_of_a_proxy_mid_fan_out_loses_nothing_per_destination(
        pg_dsn: str, tmp_path: Path) -> None:
    names = ("billing", "crm")
    async with fanned_out("postgres", tmp_path, pg_dsn, names) as dep:
        # Longer than it takes to see the blocked statement, start a second proxy and kill
        # the first.
        dep.config["store"]["statement_timeout"] = "10s"
        dep.config["store"]["lock_timeout"] = "10s"  # the blocked enqueue waits, not fails
        billing, crm = (dep.apps[n] for n in names)
        crm.hold.clear()  # crm's answers are held: forwards in flight when the proxy dies
        for app in dep.apps.values():
            await app.start()
        await dep.start(1)
        victim = dep.procs[0]
        ids = [f"evt_kill_{i:03d}" for i in range(KILL_EVENTS)]
        await dep.accept_all(ids)
        await dep.until_queues(every(all_in("stripe", ids, "done"),
                                     all_in("stripe.billing", ids, "done")),
                               timeout=30, what="fanned out, billing done")
        await crm.wait_for(lambda: len(crm.seen) >= 5, timeout=20,
                           what="crm forwards in flight")

        # Another session inserts crm's row of one more event and does not commit: that
        # event's fan-out waits for the row lock in its enqueue for crm (billing's enqueue,
        # made at the same time, has committed, or waits with it in one batched statement).
        blocker = await asyncpg.connect(dep.store_url)
        try:
            tx = blocker.transaction()
            await tx.start()
            await blocker.execute(BLOCK_CRM_ROW, BLOCKED)
            assert accepted(await dep.send(0, stripe_event(BLOCKED)), BLOCKED)
            deadline = time.monotonic() + 10
            while not await blocker.fetchval(WAITING):  # a bounded poll of the database
                assert time.monotonic() < deadline, "the fan-out never reached crm's row"
                await asyncio.sleep(0.02)
            # A second proxy joins (the first holds every lease), then the first dies
            # mid-fan-out and mid-forward.
            await dep.start(1)
            assert await blocker.fetchval(WAITING) == 1, "the fan-out is still blocked"
            await victim.kill()
            dep.procs.remove(victim)
            in_flight = {s.event_id for s in crm.seen}
            await tx.rollback()
        finally:
            await blocker.close()
        crm.hold.set()

        ids.append(BLOCKED)
        queues = await dep.until_queues(
            every(all_in("stripe", ids, "done"), all_in("stripe.billing", ids, "done"),
                  all_in("stripe.crm", ids, "done")),
            timeout=90, what="the survivor finished every destination")
        for name, app in dep.apps.items():
            assert sorted({s.event_id for s in app.seen}) == sorted(ids), name
            assert all(s.status == 200 for s in app.seen if s.answered is not None), name
            repeated = only_later_attempts_repeat(app, name)
            print(f"{name}: {len(app.seen)} requests for {len(ids)} events, repeated: "
                  f"{repeated}")
            assert set(repeated) <= in_flight, (name, set(repeated) - in_flight)
        assert billing.attempts(BLOCKED) == [1]
        assert crm.attempts(BLOCKED) == [1]
        # The blocked fan-out was taken again after the victim's lease (its attempt 2), or
        # completed by the victim's orphaned statement: either way one row, delivered once.
        print(f"{BLOCKED}: provider row {queues['stripe'][BLOCKED]}, crm row "
              f"{queues['stripe.crm'][BLOCKED]}")
        # The victim held crm's forwards: after its lease they went again, as attempt 2.
        assert any(crm.attempts(e)[:2] == [1, 2] for e in in_flight), \
            {e: crm.attempts(e) for e in in_flight}
        assert dep.errors() == []


# -- two replicas racing ---------------------------------------------------------------------------

RACE_EVENTS = 100


async def test_the_same_event_posted_to_two_replicas_at_once_reaches_each_destination_once(
        pg_dsn: str, tmp_path: Path) -> None:
    names = ("billing", "crm", "analytics")
    async with fanned_out("postgres", tmp_path, pg_dsn, names) as dep:
        for app in dep.apps.values():
            await app.start()
        await dep.start(2)
        ids = [f"evt_race_{i:03d}" for i in range(RACE_EVENTS)]
        gate = asyncio.Semaphore(8)  # 8 events, 16 requests at once

        async def race(event_id: str) -> None:
            body = stripe_event(event_id)
            headers = stripe_headers(body)
            async with gate:
                answers = await asyncio.gather(post(dep.client, dep.url(0), body, headers),
                                               post(dep.client, dep.url(1), body, headers))
            assert all(accepted(a, event_id) for a in answers), answers

        await asyncio.gather(*(race(e) for e in ids))
        queues = await dep.until_queues(
            every(*(all_in(f"stripe.{n}", ids, "done") for n in names)), timeout=60,
            what="every destination done")
        for app in dep.apps.values():
            once_each(app, ids)
        assert {queues["stripe"][e] for e in ids} == {("done", 1)}
        assert dep.errors() == []


# -- a dead destination re-driven ------------------------------------------------------------------

DEAD_EVENTS = 6


async def test_a_dead_destination_is_redriven_and_the_others_never_see_a_second_copy(
        pg_dsn: str, tmp_path: Path) -> None:
    names = ("billing", "crm", "analytics")
    async with fanned_out("postgres", tmp_path, pg_dsn, names, max_attempts=2) as dep:
        billing = dep.apps["billing"]

        async def broken(seen: Seen) -> web.StreamResponse:
            return web.json_response({"error": "broken"}, status=500)

        billing.behaviour = broken
        for app in dep.apps.values():
            await app.start()
        await dep.start(2)
        ids = [f"evt_dead_{i}" for i in range(DEAD_EVENTS)]
        await dep.accept_all(ids)
        queues = await dep.until_queues(
            every(all_in("stripe.billing", ids, "dead"), all_in("stripe.crm", ids, "done"),
                  all_in("stripe.analytics", ids, "done")),
            timeout=60, what="billing's events dead, the others done")
        assert {queues["stripe"][e] for e in ids} == {("done", 1)}  # dead only at billing
        for event_id in ids:
            assert billing.attempts(event_id) == [1, 2]

        billing.behaviour = answer_200  # the app is fixed; the operator re-drives its dead
        code, out, err = await run_cli("events", "redrive", "stripe.billing", "--dead",
                                       "--config", dep.config_path)
        assert code == 0, out + err
        queues = await dep.until_queues(all_in("stripe.billing", ids, "done"), timeout=60,
                                        what="billing's re-driven events done")
        for event_id in ids:
            assert billing.attempts(event_id) == [1, 2, 3]
            assert queues["stripe.billing"][event_id] == ("done", 3)
        for name in ("crm", "analytics"):
            once_each(dep.apps[name], ids)
            assert {queues[f"stripe.{name}"][e] for e in ids} == {("done", 1)}
        assert {queues["stripe"][e] for e in ids} == {("done", 1)}  # not fanned out again

        # The others have nothing dead to re-drive; the provider's own queue neither.
        for key in ("stripe.crm", "stripe"):
            code, out, err = await run_cli("events", "redrive", key, "--dead", "--config",
                                           dep.config_path)
            assert code == 0, out + err
        queues = await dep.queues()
        assert {queues["stripe"][e] for e in ids} == {("done", 1)}
        assert {queues["stripe.crm"][e] for e in ids} == {("done", 1)}
        assert dep.errors() == []


# -- changing the set in a running group -----------------------------------------------------------


async def providers(dep: Group, *args: str) -> str:
    code, out, err = await run_cli("providers", *args, "--config", dep.config_path)
    assert code == 0, out + err
    return out


async def until_paused(dep: Group, timeout: float = 5.0) -> None:
    """Until every process's /healthz says the provider's own queue is paused."""
    deadline = time.monotonic() + timeout
    while True:
        states = []
        for proc in dep.procs:
            async with dep.client.get(proc.admin_url + "/healthz") as resp:
                states.append((await resp.json())["providers"]["stripe"]["paused"])
        if all(states):
            return
        assert time.monotonic() < deadline, states
        await asyncio.sleep(0.02)  # polling the processes, bounded by the deadline


async def test_a_changed_set_applies_to_new_events_and_accepted_ones_keep_theirs(
        pg_dsn: str, tmp_path: Path) -> None:
    names = ("billing", "crm", "analytics")
    async with fanned_out("postgres", tmp_path, pg_dsn, names) as dep:
        for app in dep.apps.values():
            await app.start()
        dep.set_destinations(["billing", "crm"])
        await dep.start(2)

        # The provider's own queue paused: events are accepted and wait, not fanned out.
        await providers(dep, "pause", "stripe", "--reason", "adding analytics")
        await until_paused(dep)
        before = [f"evt_before_{i}" for i in range(8)]
        await dep.accept_all(before)
        queues = await dep.queues()
        assert {queues["stripe"][e][0] for e in before} == {"queued"}
        assert set(queues) == {"stripe"}

        # Restarted on a config with analytics, without crm; then resumed.
        await dep.stop()
        dep.set_destinations(["billing", "analytics"])
        await dep.start(2)
        await providers(dep, "resume", "stripe")
        after = [f"evt_after_{i}" for i in range(8)]
        await dep.accept_all(after)
        queues = await dep.until_queues(
            every(all_in("stripe", before + after, "done"),
                  all_in("stripe.billing", before + after, "done"),
                  all_in("stripe.analytics", after, "done")),
            timeout=60, what="both batches fanned out and delivered")
        # Accepted before: the set it was accepted with (billing, crm), not analytics.
        once_each(dep.apps["billing"], before + after)
        once_each(dep.apps["analytics"], after)
        assert dep.apps["crm"].seen == []
        for event_id in before:
            assert await fanned_to(dep, event_id) == ["billing", "crm"]
        assert await fanned_to(dep, after[0]) == ["billing", "analytics"]
        # crm is no longer configured: its events wait under its key, nothing lost.
        assert {queues["stripe.crm"].get(e) for e in before} == {("queued", 0)}
        assert set(queues["stripe.crm"]) == set(before)
        assert not set(queues["stripe.analytics"]) & set(before)
        assert dep.errors() == []

        # crm configured again: its waiting events are delivered, each once; new events are
        # not sent again anywhere.
        await dep.stop()
        dep.set_destinations(["billing", "crm", "analytics"])
        await dep.start(1)
        await dep.until_queues(all_in("stripe.crm", before, "done"), timeout=60,
                               what="crm's waiting events delivered")
        once_each(dep.apps["crm"], before)
        once_each(dep.apps["billing"], before + after)
        once_each(dep.apps["analytics"], after)
        assert dep.errors() == []


async def test_events_accepted_before_the_provider_fanned_out_go_to_its_destinations(
        pg_dsn: str, tmp_path: Path) -> None:
    """A queue-mode provider given destinations: the events it accepted before (for its one
    app) are fanned out to the destinations it has now whose filters admit them, not
    dropped."""
    names = ("billing", "crm")
    async with fanned_out("postgres", tmp_path, pg_dsn, names) as dep:
        for app in dep.apps.values():
            await app.start()
        stripe = dep.config["providers"]["stripe"]
        del stripe["destinations"]
        stripe["upstream"] = {"url": dep.apps["billing"].url}
        await dep.start(1)
        await providers(dep, "pause", "stripe")
        await until_paused(dep)
        invoices = [f"evt_plain_{i}" for i in range(4)]
        customer = "evt_plain_customer"
        bodies = {e: stripe_event(e) for e in invoices}
        bodies[customer] = stripe_event(customer, type="customer.created")
        before = [*invoices, customer]
        await dep.accept_all(before, bodies)

        await dep.stop()
        del stripe["upstream"]
        dep.set_destinations(names, crm={"filter": {"types": {"allow": ["invoice.*"]}}})
        await dep.start(1)
        await providers(dep, "resume", "stripe")
        queues = await dep.until_queues(
            every(all_in("stripe", before, "done"), all_in("stripe.billing", before, "done"),
                  all_in("stripe.crm", invoices, "done")),
            timeout=60, what="the events accepted before fanned out")
        once_each(dep.apps["billing"], before)
        once_each(dep.apps["crm"], invoices)  # its filter keeps invoices only
        assert customer not in queues["stripe.crm"]
        assert await fanned_to(dep, customer) == ["billing"]
        assert await fanned_to(dep, invoices[0]) == ["billing", "crm"]
        assert dep.errors() == []
