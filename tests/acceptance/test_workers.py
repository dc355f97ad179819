"""``workers: 2``: one supervisor and two worker processes on one listening port, on SQLite and
on PostgreSQL. Connections reach both workers; each event still reaches the app once; /metrics
sums the workers; the admin listener and the store upkeep run once; SIGTERM drains the group
within shutdown_timeout + 2 s; a worker killed stops the group with a non-zero exit; a
supervisor killed takes its workers with it, a stopped one too. A worker that falls silent
(stopped, or its event loop blocked in a handler) is replaced while deliveries go on being
answered, and /healthz says so; so it does of a silent supervisor. A replacement starts from
the config the group started with; one that cannot start (the store down, the OS refusing its
process) leaves its seat vacant and is tried again while the other worker answers; a worker
that stalls in its start-up takes no connection and is given up on; Ctrl-C during a start-up
stops the group cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import sqlite3
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sidecar.runtime.wiring import SHUTDOWN_OVERRUN
from tests.acceptance.conftest import Deployment, deploy, run_cli
from tests.pgserver import ThrowawayCluster, free_port
from tests.support import (
    REPO,
    ProxyProcess,
    StubApp,
    base_config,
    post,
    stripe_event,
    stripe_headers,
    until,
    write_config,
)

WORKERS = 2
pytestmark = pytest.mark.timeout(180)


@pytest.fixture(params=["sqlite", "postgres"])
async def group(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Deployment]:
    """A deployment whose proxy runs ``workers: 2`` (one ``ProxyProcess``: the supervisor)."""
    admin_dsn = request.getfixturevalue("pg_dsn") if request.param == "postgres" else None
    async with deploy(request.param, tmp_path, admin_dsn) as dep:
        dep.config["workers"] = WORKERS
        yield dep


def running(pid: int) -> bool:
    """Whether ``pid`` runs: gone, or every thread of it a zombie, is not running (an orphan
    waits for init to reap it). Each thread counts: a killed process's main thread can be a
    zombie while another is still exiting, and its sockets close only with the last thread."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except FileNotFoundError:
        return False
    for task in tasks:
        try:
            stat = (task / "stat").read_text()
        except FileNotFoundError:
            continue  # that thread is gone
        if stat.rpartition(")")[2].split()[0] not in ("Z", "X"):
            return True
    return False


def deliveries(proc: ProxyProcess) -> list[dict[str, Any]]:
    return [e for e in proc.logs if e.get("event") == "delivery"]


async def post_each_on_its_own_connection(url: str, bodies: list[bytes],
                                          timeout: float = 300.0) -> list[int]:
    """Every body at once, each on a new connection (the kernel picks a worker per
    connection); their statuses."""
    return [status for status, _ in await deliver_each_on_its_own_connection(url, bodies,
                                                                              timeout)]


async def deliver_each_on_its_own_connection(url: str, bodies: list[bytes],
                                             timeout: float) -> list[tuple[int, float]]:
    """As post_each_on_its_own_connection: (status, seconds to the answer) each."""
    connector = aiohttp.TCPConnector(force_close=True, limit=0)
    async with aiohttp.ClientSession(connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=timeout)) as client:
        async def one(body: bytes) -> tuple[int, float]:
            started = time.monotonic()
            status, _, _ = await post(client, url, body, stripe_headers(body))
            return status, time.monotonic() - started

        return list(await asyncio.gather(*(one(body) for body in bodies)))


async def metric(proc: ProxyProcess, client: aiohttp.ClientSession,
                 name: str) -> dict[tuple[tuple[str, str], ...], float]:
    async with client.get(proc.admin_url + "/metrics") as resp:
        assert resp.status == 200
        text = await resp.text()
    return {tuple(sorted(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples if sample.name == name}


async def test_connections_reach_both_workers_and_each_event_the_app_once(
    group: Deployment,
) -> None:
    await group.start(1)
    proc = group.procs[0]
    assert group.client is not None
    listening = [e for e in proc.logs if e.get("event") == "listening"]
    assert len(listening) == 1 and listening[0]["workers"] == WORKERS
    assert "worker" not in listening[0]

    # 60 new events, each on its own connection, all at once.
    bodies = [stripe_event(f"evt_many_{i}") for i in range(60)]
    assert await post_each_on_its_own_connection(proc.url + "/webhooks/stripe", bodies) \
        == [200] * 60
    assert group.stub.count() == 60
    by_worker = Counter(e["worker"] for e in deliveries(proc))
    print(f"[{group.kind}] new events by worker: {dict(by_worker)}")
    assert set(by_worker) == {0, 1}, by_worker

    # 50 copies of one new event over 50 connections at once: the app sees it once.
    copies = [stripe_event("evt_burst")] * 50
    statuses = await post_each_on_its_own_connection(proc.url + "/webhooks/stripe", copies)
    assert statuses == [200] * 50, Counter(statuses)
    assert group.stub.count("evt_burst") == 1
    burst = [e for e in deliveries(proc) if e.get("event_id") == "evt_burst"]
    print(f"[{group.kind}] copies by worker: {dict(Counter(e['worker'] for e in burst))}, "
          f"results: {dict(Counter(e['result'] for e in burst))}")
    assert {e["worker"] for e in burst} == {0, 1}
    assert sum(1 for e in burst if e["result"] == "new") == 1
    row = await group.rows.one("stripe", "evt_burst")
    assert row is not None and row["state"] == "done" and row["attempt"] == 1

    # /metrics (one admin listener) counts every delivery of both workers.
    events = await metric(proc, group.client, "webhook_events_total")
    assert sum(events.values()) == 110, events
    assert events[(("provider", "stripe"), ("result", "new"))] == 61
    answers = await metric(proc, group.client, "webhook_app_answers_total")
    assert sum(answers.values()) == 61
    latency = await metric(proc, group.client, "webhook_upstream_latency_seconds_count")
    assert sum(latency.values()) == 61
    # So do the end-to-end durations (one per delivery, labelled as counted; each observed
    # once its answer was written, so polled) and the coalesced writes' statement sizes (every
    # result write in exactly one statement, whichever worker sent it).
    for _ in range(200):  # a bounded poll (<= 10 s)
        durations = await metric(proc, group.client, "webhook_delivery_duration_seconds_count")
        if durations == events:
            break
        await asyncio.sleep(0.05)
    assert durations == events
    batched = await metric(proc, group.client, "webhook_store_batch_size_sum")
    assert batched[(("verb", "complete"),)] == 61, batched
    assert batched[(("verb", "claim"),)] >= 61, batched  # a claim per new event at least
    for path in ("/healthz", "/readyz"):
        async with group.client.get(proc.admin_url + path) as resp:
            assert resp.status == 200, path
    assert all(e.get("level") != "error" for e in proc.logs)


async def break_retention(group: Deployment) -> None:
    """One row past its retention, and a trigger that refuses every delete: each retention
    sweep fails, and the process that ran it logs so."""
    if group.kind == "sqlite":
        with contextlib.closing(sqlite3.connect(group.store_url[len("sqlite:///"):])) as db:
            db.execute("UPDATE webhook_event SET received_at = received_at - 1e9")
            db.execute("CREATE TRIGGER keep BEFORE DELETE ON webhook_event "
                       "BEGIN SELECT RAISE(ABORT, 'retention refused by the test'); END")
            db.commit()
        return
    conn = await asyncpg.connect(group.store_url)
    try:
        # One transaction, the trigger first: a sweep between an aged row's commit and the
        # trigger's would delete the row (the maintenance loop runs every 100 ms).
        async with conn.transaction():
            await conn.execute(
                "CREATE FUNCTION refuse_delete() RETURNS trigger LANGUAGE plpgsql "
                "AS $$ BEGIN RAISE EXCEPTION 'retention refused by the test'; END $$")
            await conn.execute("CREATE TRIGGER keep BEFORE DELETE ON webhook_event "
                               "FOR EACH ROW EXECUTE FUNCTION refuse_delete()")
            await conn.execute("UPDATE webhook_event SET received_at = received_at - "
                               "interval '3650 days'")
    finally:
        await conn.close()


async def test_store_upkeep_and_the_admin_listener_run_once(group: Deployment) -> None:
    group.config["maintenance"] = {"interval": "100ms"}
    await group.start(1)
    proc = group.procs[0]
    assert group.client is not None
    body = stripe_event("evt_old")
    assert (await post(group.client, proc.url + "/webhooks/stripe", body,
                       stripe_headers(body)))[0] == 200
    await break_retention(group)

    def failures() -> list[dict[str, Any]]:
        return [e for e in proc.logs
                if e.get("event") in ("maintenance_failed", "maintenance_crashed")]

    await until(lambda: len(failures()) >= 5, timeout=20)
    # Both workers started together with a 100 ms interval: had the second one swept too,
    # its failures would be among these.
    assert {e["worker"] for e in failures()} == {0}
    errors = await metric(proc, group.client, "webhook_maintenance_errors_total")
    assert sum(errors.values()) >= 5
    # The stuck-row gauge comes from that one worker: one series per provider, not one per
    # worker.
    stuck = await metric(proc, group.client, "webhook_events_stuck")
    assert stuck.get((("provider", "stripe"),)) == 0.0
    assert len(stuck) == len(group.config["providers"])
    assert await group.rows.one("stripe", "evt_old") is not None


async def test_sigterm_lets_a_delivery_in_flight_finish_and_the_group_exits(
    group: Deployment,
) -> None:
    group.config["shutdown_timeout"] = "5s"
    await group.start(1)
    proc = group.procs[0]
    assert group.client is not None and proc.proc is not None
    group.stub.hold.clear()
    body = stripe_event("evt_in_flight")
    inflight = asyncio.create_task(post(group.client, proc.url + "/webhooks/stripe", body,
                                        stripe_headers(body)))
    await group.stub.wait_for(lambda: group.stub.count() == 1)

    started = time.monotonic()
    proc.proc.terminate()

    # The supervisor and both workers have begun their graceful stop.
    await until(lambda: {e.get("worker") for e in proc.logs
                          if e.get("event") == "shutting_down"} == {None, 0, 1}, timeout=5)
    group.stub.hold.set()  # the app answers while the group drains
    status, _, _ = await inflight
    assert status == 200
    assert await proc.wait(timeout=15) == 0
    took = time.monotonic() - started
    group.procs = []
    print(f"[{group.kind}] SIGTERM to exit with a delivery in flight: {took:.3f} s")
    assert took < 5.0 + SHUTDOWN_OVERRUN
    row = await group.rows.one("stripe", "evt_in_flight")
    assert row is not None and row["state"] == "done" and row["response_status"] == 200
    assert [e.get("worker") for e in proc.logs if e.get("event") == "stopped"].count(None) == 1
    assert all(e.get("level") != "error" for e in proc.logs)


async def test_sigterm_with_a_forward_held_past_the_timeout_exits_within_the_bound(
    group: Deployment,
) -> None:
    timeout = 1.0
    group.config["shutdown_timeout"] = f"{timeout}s"
    group.config["upstream"]["timeout"] = "30s"
    for provider in group.config["providers"].values():
        provider["lease"] = "60s"
    await group.start(1)
    proc = group.procs[0]
    assert group.client is not None and proc.proc is not None
    group.stub.hold.clear()  # never answers while the group shuts down
    held = [stripe_event(f"evt_held_{i}") for i in range(8)]
    inflight = asyncio.gather(*(post_each_on_its_own_connection(proc.url + "/webhooks/stripe",
                                                                [body]) for body in held),
                              return_exceptions=True)
    await group.stub.wait_for(lambda: group.stub.count() == len(held))

    started = time.monotonic()
    proc.proc.terminate()
    assert await proc.wait(timeout=timeout + SHUTDOWN_OVERRUN + 10) == 0
    took = time.monotonic() - started
    group.procs = []
    print(f"[{group.kind}] SIGTERM to exit, forwards held: {took:.3f} s "
          f"(bound {timeout + SHUTDOWN_OVERRUN} s)")
    assert timeout <= took <= timeout + SHUTDOWN_OVERRUN
    for answer in await inflight:
        assert not isinstance(answer, list) or answer[0] >= 500  # never a 2xx
    cancelled = [e for e in proc.logs if e.get("event") == "deliveries_cancelled"]
    assert sum(e["count"] for e in cancelled) == len(held)
    group.stub.hold.set()


async def test_a_worker_killed_stops_the_group_with_a_failure(group: Deployment) -> None:
    await group.start(1)
    proc = group.procs[0]
    assert group.client is not None
    pids = next(e["pids"] for e in proc.logs if e.get("event") == "listening")
    started = time.monotonic()
    os.kill(pids[1], signal.SIGKILL)
    assert await proc.wait(timeout=30) == 1
    took = time.monotonic() - started
    group.procs = []
    print(f"[{group.kind}] worker killed to group exit: {took:.3f} s")
    assert took < 10.0 + SHUTDOWN_OVERRUN  # the other worker drained gracefully
    exited = [e for e in proc.logs if e.get("event") == "worker_exited"]
    assert [(e["worker"], e["pid"], e["signal"]) for e in exited] == [(1, pids[1], "SIGKILL")]
    assert [e.get("worker") for e in proc.logs if e.get("event") == "stopped"] \
        == [0, None]
    assert not any(running(pid) for pid in pids)


async def test_a_worker_that_cannot_start_stops_the_group_with_its_status(
    tmp_path: Path,
) -> None:
    """No store: each worker fails before it listens, as the single process does (exit 1);
    no ``listening`` line is logged, and the supervisor exits with the workers' status."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
    port = closed.getsockname()[1]
    try:
        config = base_config("http://127.0.0.1:9", f"postgresql://x@127.0.0.1:{port}/none",
                             workers=WORKERS)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "sidecar", "run", "--config",
            str(write_config(tmp_path, config)), cwd=str(REPO),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        _, err = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        closed.close()
    lines = err.decode()
    assert proc.returncode == 1, lines
    assert "store unavailable" in lines
    assert '"worker_exited"' in lines and '"listening"' not in lines


# -- a worker that falls silent ------------------------------------------------------------------

WORKER_TIMEOUT = 1.0
STRIPE = "/webhooks/stripe"


@pytest.fixture
async def quick_group(tmp_path: Path) -> AsyncIterator[Deployment]:
    """``workers: 2`` on SQLite, with a worker_timeout of 1 s. A stopped or blocked worker
    would outlive its supervisor's SIGKILL (it cannot read its end of file): every worker the
    logs name is killed at the end."""
    async with deploy("sqlite", tmp_path, None) as dep:
        dep.config["workers"] = WORKERS
        dep.config["worker_timeout"] = f"{WORKER_TIMEOUT}s"
        try:
            yield dep
        finally:
            for pid in {pid for proc in dep.procs for pid in worker_pids(proc)}:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def worker_pids(proc: ProxyProcess) -> list[int]:
    pids = [pid for e in proc.logs if e.get("event") == "listening" for pid in e["pids"]]
    return pids + [e["pid"] for e in proc.logs
                   if e.get("event") in ("worker_replaced", "event_loop_blocked_by_test")]


async def health(client: aiohttp.ClientSession, proc: ProxyProcess) -> tuple[int, Any]:
    """/healthz's status and body, without its providers' holds (tests/acceptance/
    test_provider_holds.py checks those): these tests are about the group's seats."""
    async with client.get(proc.admin_url + "/healthz") as resp:
        body = await resp.json()
        body.pop("providers", None)
        return resp.status, body


async def health_turns(client: aiohttp.ClientSession, proc: ProxyProcess, status: int,
                       timeout: float) -> tuple[float, Any]:
    """Polls /healthz until it answers ``status``; (seconds it took, the answer)."""
    started = time.monotonic()
    async with asyncio.timeout(timeout):
        while True:
            answer, body = await health(client, proc)
            if answer == status:
                return time.monotonic() - started, body
            await asyncio.sleep(0.02)  # polling the endpoint under test, bounded above


async def listens(client: aiohttp.ClientSession, proc: ProxyProcess, timeout: float) -> None:
    """Polls /healthz until the admin listener answers (its socket listens once worker 0 does:
    connections are refused until then)."""
    async with asyncio.timeout(timeout):
        while True:
            with contextlib.suppress(aiohttp.ClientConnectorError):
                await health(client, proc)
                return
            await asyncio.sleep(0.02)  # polling the endpoint under test, bounded above


async def unhealthy_then_healthy(client: aiohttp.ClientSession,
                                  proc: ProxyProcess) -> tuple[float, Any, float]:
    """/healthz answers 503, then 200 again: (seconds to the 503, its body, to the 200)."""
    started = time.monotonic()
    unhealthy_after, body = await health_turns(client, proc, 503, timeout=10.0)
    await health_turns(client, proc, 200, timeout=20.0)
    return unhealthy_after, body, time.monotonic() - started


async def deliveries_go_on_while_a_worker_is_replaced(
    dep: Deployment, proc: ProxyProcess, silent_pid: int, prefix: str,
) -> None:
    """Right after worker 1 fell silent: 40 deliveries, each on a new connection (about half
    queue on worker 1's socket), are all answered 200 — those on worker 1's share once its
    successor accepts them. /healthz answers 503 meanwhile and 200 again once it listens."""
    assert dep.client is not None
    bodies = [stripe_event(f"{prefix}_{i}") for i in range(40)]
    answers, (unhealthy_after, unhealthy, healthy_after) = await asyncio.gather(
        deliver_each_on_its_own_connection(proc.url + STRIPE, bodies, timeout=20.0),
        unhealthy_then_healthy(dep.client, proc))
    replaced = await proc.wait_for_log("worker_replaced", timeout=5.0)
    slowest = max(seconds for _, seconds in answers)
    print(f"worker 1 silent (pid {silent_pid}): /healthz 503 after {unhealthy_after:.2f} s, 200 "
          f"again after {healthy_after:.2f} s; successor listening {replaced['took_s']:.2f} s "
          f"after detection; 40 deliveries, slowest {slowest:.2f} s")
    assert [status for status, _ in answers] == [200] * len(bodies)
    # Silence is found within worker_timeout (+ a heartbeat, + the grace of one more look);
    # then the successor starts; then it answers what queued.
    assert slowest < WORKER_TIMEOUT + replaced["took_s"] + 2.0
    assert dep.stub.count() == len(bodies)
    assert unhealthy == {"status": "unavailable", "reason": "workers_down", "workers_down": [1]}
    unresponsive = [e for e in proc.logs if e.get("event") == "worker_unresponsive"]
    assert [(e["worker"], e["pid"], e["action"], e["level"]) for e in unresponsive] \
        == [(1, silent_pid, "replace", "error")]
    assert replaced["worker"] == 1 and replaced["pid"] != silent_pid
    await until(lambda: not running(silent_pid), timeout=5)  # killed, and reaped
    # The deliveries that queued on worker 1's socket were answered by its successor.
    assert any(e["worker"] == 1 for e in deliveries(proc)
               if str(e.get("event_id", "")).startswith(prefix))
    assert await metric(proc, dep.client, "webhook_workers_replaced_total") == {(): 1.0}


async def test_a_stopped_worker_is_replaced_while_deliveries_are_answered(
    quick_group: Deployment,
) -> None:
    await quick_group.start(1)
    proc = quick_group.procs[0]
    assert quick_group.client is not None
    pids = next(e["pids"] for e in proc.logs if e.get("event") == "listening")
    assert await health(quick_group.client, proc) == (200, {"status": "ok"})

    os.kill(pids[1], signal.SIGSTOP)
    await deliveries_go_on_while_a_worker_is_replaced(quick_group, proc, pids[1], "evt_stopped")

    assert await proc.terminate(timeout=20) == 0  # the group, its new worker 1 included
    quick_group.procs = []
    assert [e.get("worker") for e in proc.logs if e.get("event") == "stopped"].count(None) == 1


async def test_a_replaced_worker_leaves_no_forwards_in_flight_behind(
    quick_group: Deployment,
) -> None:
    """16 deliveries held by the app, each on its own connection (the kernel spreads them over
    both workers); worker 1 is stopped and replaced while its forwards wait. Once the app
    answers and the deliveries settle, /metrics counts no forward in flight: the killed
    worker's share went with it."""
    quick_group.config["upstream"]["timeout"] = "30s"
    for provider in quick_group.config["providers"].values():
        provider["lease"] = "60s"
    await quick_group.start(1)
    proc, stub = quick_group.procs[0], quick_group.stub
    assert quick_group.client is not None
    pids = next(e["pids"] for e in proc.logs if e.get("event") == "listening")
    stub.hold.clear()
    count = 16
    bodies = [stripe_event(f"evt_phantom_{i}") for i in range(count)]
    sending = asyncio.create_task(deliver_each_settled(proc.url + STRIPE, bodies))
    try:
        await stub.wait_for(lambda: len(stub.seen) == count, timeout=20.0,
                            what="every delivery forwarded")
        assert sum((await metric(proc, quick_group.client,
                                 "webhook_forwards_in_flight")).values()) == count
        os.kill(pids[1], signal.SIGSTOP)
        await proc.wait_for_log("worker_replaced", timeout=20.0)
    finally:
        stub.hold.set()
    statuses = await sending
    lost = [status for status in statuses if status is None]
    print(f"forwards held by the stopped worker: {len(lost)} of {count}")
    assert lost, "no delivery reached worker 1 (the kernel hashes connections; 2^-16)"
    assert all(status == 200 for status in statuses if status is not None)

    async def in_flight() -> float:
        return sum((await metric(proc, quick_group.client, "webhook_forwards_in_flight"))
                   .values())

    async with asyncio.timeout(10.0):  # the killed worker is reaped: then its share is gone
        while True:
            if await in_flight() == 0:
                return
            await asyncio.sleep(0.1)  # polling the metric under test, bounded above


async def deliver_each_settled(url: str, bodies: list[bytes]) -> list[int | None]:
    """Every body at once, each on a new connection; each one's status, or None when its
    connection was lost (its worker killed)."""
    connector = aiohttp.TCPConnector(force_close=True, limit=0)
    async with aiohttp.ClientSession(connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=40.0)) as client:
        async def one(body: bytes) -> int | None:
            try:
                status, _, _ = await post(client, url, body, stripe_headers(body))
            except aiohttp.ClientError:
                return None
            return status

        return list(await asyncio.gather(*(one(body) for body in bodies)))


async def test_a_worker_whose_loop_is_blocked_in_a_handler_is_replaced(
    quick_group: Deployment,
) -> None:
    """The proxy's worker 1 runs a handler that sleeps synchronously (a test-only route added
    by tests/hooks/sitecustomize.py): its event loop stops, and with it its heartbeat."""
    hooks = str(REPO / "tests" / "hooks")
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [hooks, os.environ.get("PYTHONPATH")])),
           "BLOCK_LOOP_WORKER": "1"}
    proc = await ProxyProcess(write_config(quick_group.tmp, quick_group.config), env=env).start()
    quick_group.procs = [proc]
    client = quick_group.client
    assert client is not None

    blocked: dict[str, Any] | None = None
    for _ in range(50):  # new connections until one lands on worker 1 (worker 0 answers 409)
        connector = aiohttp.TCPConnector(force_close=True)
        async with aiohttp.ClientSession(connector=connector) as one_off:
            aimed = asyncio.create_task(one_off.post(proc.url + "/test-only/block-loop"))
            logged = asyncio.create_task(proc.wait_for_log("event_loop_blocked_by_test", 10))
            done, _ = await asyncio.wait({aimed, logged}, return_when=asyncio.FIRST_COMPLETED)
            if logged in done:
                blocked = logged.result()
                aimed.cancel()
                break
            logged.cancel()
            async with aimed.result() as resp:
                assert resp.status == 409
    assert blocked is not None and blocked["worker"] == 1
    await deliveries_go_on_while_a_worker_is_replaced(quick_group, proc, blocked["pid"],
                                                      "evt_blocked")


async def test_health_says_when_the_supervisor_is_silent(quick_group: Deployment) -> None:
    """The supervisor stopped: no one would replace a silent worker, so /healthz answers 503
    past worker_timeout; deliveries are still answered. Resumed, it kills no worker for
    the silence its own pause caused, and /healthz answers 200 again."""
    await quick_group.start(1)
    proc = quick_group.procs[0]
    assert quick_group.client is not None and proc.proc is not None
    proc.signal(signal.SIGSTOP)
    try:
        took, body = await health_turns(quick_group.client, proc, 503, timeout=10.0)
        assert body["reason"] == "supervisor_silent" and body["silent_s"] >= WORKER_TIMEOUT
        answers = await deliver_each_on_its_own_connection(
            proc.url + STRIPE, [stripe_event(f"evt_unsupervised_{i}") for i in range(10)], 10.0)
        assert [status for status, _ in answers] == [200] * 10
        await asyncio.sleep(WORKER_TIMEOUT)  # the fault: the pause outlasts worker_timeout
    finally:
        proc.signal(signal.SIGCONT)
    await health_turns(quick_group.client, proc, 200, timeout=10.0)
    print(f"supervisor stopped: /healthz 503 after {took:.2f} s")
    assert not any(e.get("event") == "worker_unresponsive" for e in proc.logs)
    assert await proc.terminate(timeout=20) == 0
    quick_group.procs = []


async def test_a_fourth_silence_within_ten_minutes_stops_the_group(
    quick_group: Deployment,
) -> None:
    """Replacing is not allowed to hide a loop: three silent workers are replaced; the fourth
    stops the group with exit status 1, as a worker's crash does, for the orchestrator to see
    and count."""
    await quick_group.start(1)
    proc = quick_group.procs[0]
    silent = [next(e["pids"] for e in proc.logs if e.get("event") == "listening")[1]]

    def replacements() -> list[dict[str, Any]]:
        return [e for e in proc.logs if e.get("event") == "worker_replaced"]

    for count in range(1, 4):
        os.kill(silent[-1], signal.SIGSTOP)
        await until(lambda: len(replacements()) >= count, timeout=20)  # noqa: B023 (awaited)
        silent.append(replacements()[-1]["pid"])
    os.kill(silent[-1], signal.SIGSTOP)
    assert await proc.wait(timeout=30) == 1
    quick_group.procs = []
    unresponsive = [e for e in proc.logs if e.get("event") == "worker_unresponsive"]
    assert [(e["pid"], e["action"]) for e in unresponsive] \
        == [(pid, "replace") for pid in silent[:3]] + [(silent[3], "stop_group")]
    assert [e["exit_code"] for e in proc.logs if e.get("event") == "stopped"
            and "worker" not in e] == [1]
    await until(lambda: not any(running(pid) for pid in silent), timeout=5)


# -- what a group does when a worker cannot start, or its supervisor is gone -------------------

def hooks(**variables: str) -> dict[str, str]:
    """The environment that loads tests/hooks/sitecustomize.py into the proxy's processes (it
    imports this repository's ``sidecar`` before the interpreter adds the working directory to
    its path), with the hook's ``variables``."""
    path = [str(REPO / "tests" / "hooks"), str(REPO), os.environ.get("PYTHONPATH")]
    return {"PYTHONPATH": os.pathsep.join(filter(None, path)), **variables}


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.parametrize("workers", [1, 2])
async def test_every_address_listen_resolves_to_is_served(tmp_path: Path, workers: int) -> None:
    """``listen: localhost:PORT``, with localhost resolving to ::1 and 127.0.0.1 (as most
    machines' /etc/hosts say): deliveries over either loopback are answered, by every worker
    (8 connections each, spread over the seats by the kernel)."""
    if not ipv6_loopback():
        pytest.skip("this machine has no IPv6 loopback")
    async with deploy("sqlite", tmp_path, None) as dep:
        port = free_port()
        dep.config["listen"] = f"localhost:{port}"
        dep.config["workers"] = workers
        proc = ProxyProcess(write_config(tmp_path, dep.config),
                            env=hooks(LOCALHOST_BOTH_LOOPBACKS="1"))
        dep.procs = [await proc.start()]
        for host in ("127.0.0.1", "[::1]"):
            bodies = [stripe_event(f"evt_{host.strip('[]')}_{i}") for i in range(8)]
            statuses = await post_each_on_its_own_connection(f"http://{host}:{port}{STRIPE}",
                                                             bodies, timeout=10.0)
            assert statuses == [200] * len(bodies), host
        served = {e["worker"] for e in deliveries(proc)} if workers > 1 else set()
        print(f"workers {workers}: 16 deliveries over both loopbacks, by workers {served}")
        assert dep.stub.count() == 16


def replacements(proc: ProxyProcess) -> list[dict[str, Any]]:
    return [e for e in proc.logs if e.get("event") == "worker_replaced"]


@pytest.mark.parametrize("edit", ["a_provider_added", "a_broken_file"])
async def test_a_replacement_starts_from_the_config_the_group_started_with(
    quick_group: Deployment, edit: str,
) -> None:
    """The config file changes under a running group (Kubernetes updates a mounted ConfigMap in
    place): a worker that replaces a silent one starts from the bytes its supervisor read at
    start-up, so the group never serves two configurations at once, and a file broken meanwhile
    does not stop the group."""
    await quick_group.start(1)
    proc = quick_group.procs[0]
    pids = next(e["pids"] for e in proc.logs if e.get("event") == "listening")
    if edit == "a_provider_added":
        changed = {**quick_group.config, "providers": {
            **quick_group.config["providers"],
            "stripe_new": {**quick_group.config["providers"]["stripe"],
                           "path": "/webhooks/stripe-new"}}}
        write_config(quick_group.tmp, changed)
    else:
        (quick_group.tmp / "config.yaml").write_text("providers: [not, a, mapping\n")

    os.kill(pids[1], signal.SIGSTOP)
    replaced = await proc.wait_for_log("worker_replaced", timeout=20.0)
    assert replaced["worker"] == 1
    bodies = [stripe_event(f"evt_config_{i}") for i in range(20)]
    # 20 connections: each worker gets some (all on one: a chance of 2 in a million).
    assert await post_each_on_its_own_connection(proc.url + "/webhooks/stripe-new", bodies,
                                                 timeout=10.0) == [404] * 20
    assert await post_each_on_its_own_connection(proc.url + STRIPE, bodies,
                                                 timeout=10.0) == [200] * 20
    assert {e["worker"] for e in deliveries(proc)} == {0, 1}
    assert await proc.terminate(timeout=20) == 0
    quick_group.procs = []


async def test_a_replacement_that_cannot_reach_the_store_waits_while_the_group_answers_503(
    pg_throwaway_cluster: ThrowawayCluster, tmp_path: Path,
) -> None:
    """PostgreSQL is down when a silent worker is replaced: its successor cannot start (the
    store is unavailable), so its seat stays vacant — its socket closed, so the kernel gives
    its connections to the other worker, which answers each delivery 503 as the documented
    outage answer — and the seat is tried again, with a backoff, until the store is back. The
    group does not stop."""
    cluster = pg_throwaway_cluster
    stub = await StubApp().start()
    try:
        config = base_config(stub.url, cluster.dsn, workers=WORKERS,
                             worker_timeout=f"{WORKER_TIMEOUT}s")
        path = write_config(tmp_path, config)
        code, _, err = await run_cli("migrate", "--config", str(path))
        assert code == 0, err
        proc = await ProxyProcess(path).start()
        try:
            await store_outage_while_a_worker_is_replaced(proc, cluster)
        finally:  # the workers first: a stopped one would hold the supervisor's stderr open
            for pid in worker_pids(proc):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            await proc.kill()
    finally:
        await stub.stop()


async def store_outage_while_a_worker_is_replaced(proc: ProxyProcess,
                                                  cluster: ThrowawayCluster) -> None:
    pids = next(e["pids"] for e in proc.logs if e.get("event") == "listening")
    await asyncio.to_thread(cluster.stop)
    os.kill(pids[1], signal.SIGSTOP)
    failed = await proc.wait_for_log("worker_start_failed", timeout=20.0)
    assert (failed["worker"], failed["cause"], failed["action"]) == (1, "exited", "retry")
    assert failed["exit_code"] == 1 and failed["retry_in_s"] > 0

    answers = await deliver_each_on_its_own_connection(
        proc.url + STRIPE, [stripe_event(f"evt_outage_{i}") for i in range(20)], timeout=10.0)
    slowest = max(seconds for _, seconds in answers)
    assert [status for status, _ in answers] == [503] * 20, answers
    async with aiohttp.ClientSession() as client:
        status, body = await health(client, proc)
        assert (status, body) == (200, {"status": "ok", "workers_vacant": [1]})
        vacant = await metric(proc, client, "webhook_workers_vacant")
        assert vacant == {(): 1.0}

        await asyncio.to_thread(cluster.start)
        replaced = await proc.wait_for_log("worker_replaced", timeout=30.0)
        assert replaced["worker"] == 1 and replaced["pid"] not in pids
        answers = await deliver_each_on_its_own_connection(
            proc.url + STRIPE, [stripe_event(f"evt_back_{i}") for i in range(20)], timeout=10.0)
        assert [status for status, _ in answers] == [200] * 20
        assert await health(client, proc) == (200, {"status": "ok"})
    tries = [e for e in proc.logs if e.get("event") == "worker_start_failed"]
    print(f"store down: 20 deliveries answered 503, slowest {slowest:.2f} s; the seat was tried "
          f"{len(tries) + 1} times, back {replaced['took_s']:.2f} s after the kill")
    assert all(e["action"] == "retry" for e in tries)
    code = await proc.terminate(timeout=20)
    # Once seen failing in CI (exit 1, a worker that failed at the stop): say which and why.
    assert code == 0, [e for e in proc.logs if e.get("level") in ("error", "warning")][-8:]


def interpreter_link(tmp: Path) -> Path:
    """A folder that passes for this interpreter's environment (its ``pyvenv.cfg``, its
    ``lib``), whose ``bin/python`` links to this interpreter: a proxy started under that path
    starts its workers with it, as long as the link is there."""
    prefix = Path(sys.prefix)
    home = tmp / "python"
    (home / "bin").mkdir(parents=True)
    if (prefix / "pyvenv.cfg").exists():
        shutil.copy(prefix / "pyvenv.cfg", home / "pyvenv.cfg")
        (home / "lib").symlink_to(prefix / "lib")
    python = home / "bin" / "python"
    python.symlink_to(sys.executable)
    return python


async def test_a_worker_that_cannot_be_spawned_stops_the_group_cleanly(tmp_path: Path) -> None:
    """The interpreter the supervisor was started from is gone (an upgrade removed it): the OS
    refuses to start worker 0 (ENOENT). One ``worker_start_failed`` line says so, no traceback,
    and the group stops with exit status 1."""
    python = interpreter_link(tmp_path)
    python.unlink()
    config = base_config("http://127.0.0.1:9", f"sqlite:///{tmp_path / 'events.db'}",
                         workers=WORKERS)
    proc = ProxyProcess(write_config(tmp_path, config), argv0=str(python))
    with pytest.raises(RuntimeError, match="did not start"):
        await proc.start()
    assert proc.proc is not None and proc.proc.returncode == 1
    failed = [e for e in proc.logs if e.get("event") == "worker_start_failed"]
    assert [(e["worker"], e["cause"], e["action"]) for e in failed] \
        == [(0, "spawn_error", "stop_group")]
    assert "No such file" in failed[0]["error"]
    assert [e["exit_code"] for e in proc.logs if e.get("event") == "stopped"] == [1]
    assert not any("Traceback" in line for line in proc.raw_logs), proc.raw_logs


async def test_a_replacement_that_cannot_be_spawned_leaves_the_group_serving(
    quick_group: Deployment,
) -> None:
    """The interpreter goes away under a running group, then a worker falls silent: its
    successor cannot be started (ENOENT). The healthy worker is neither killed nor stopped: it
    answers every delivery (the vacant seat's socket is closed, so none waits there), and the
    seat is tried again until a worker starts — here once the interpreter is back."""
    python = interpreter_link(quick_group.tmp)
    proc = await ProxyProcess(write_config(quick_group.tmp, quick_group.config),
                              argv0=str(python)).start()
    quick_group.procs = [proc]
    pids = next(e["pids"] for e in proc.logs if e.get("event") == "listening")
    python.unlink()
    os.kill(pids[1], signal.SIGSTOP)
    failed = await proc.wait_for_log("worker_start_failed", timeout=20.0)
    assert (failed["worker"], failed["cause"], failed["action"]) == (1, "spawn_error", "retry")

    bodies = [stripe_event(f"evt_unspawned_{i}") for i in range(20)]
    assert await post_each_on_its_own_connection(proc.url + STRIPE, bodies, timeout=10.0) \
        == [200] * 20
    assert running(pids[0])
    python.symlink_to(sys.executable)
    replaced = await proc.wait_for_log("worker_replaced", timeout=20.0)
    assert replaced["worker"] == 1
    assert await proc.terminate(timeout=20) == 0
    quick_group.procs = []
    assert not any("Traceback" in line for line in proc.raw_logs)


async def test_a_worker_that_stalls_before_its_first_heartbeat_is_given_up_on(
    tmp_path: Path,
) -> None:
    """Worker 1 stalls in its start-up, its event loop blocked before its first heartbeat.
    Meanwhile its seat takes no connection — every delivery is answered by worker 0 — and
    /healthz names the seat vacant. Past 10 worker_timeouts it is killed; the group, which
    never started, stops with exit status 1, as a single process that cannot start does."""
    timeout = 0.5
    stub = await StubApp().start()
    try:
        config = base_config(stub.url, f"sqlite:///{tmp_path / 'events.db'}", workers=WORKERS,
                             worker_timeout=f"{timeout}s", listen=f"127.0.0.1:{free_port()}",
                             admin_listen=f"127.0.0.1:{free_port()}")
        proc = ProxyProcess(write_config(tmp_path, config),
                            env=hooks(STALL_START_WORKER="1", STALL_START_SYNC="1"))
        await proc.start(until="worker_start_stalled_by_test")
        started = time.monotonic()
        proc.listen, proc.admin = config["listen"], config["admin_listen"]
        try:
            async with aiohttp.ClientSession() as client:
                await listens(client, proc, timeout=10.0)  # worker 0
                bodies = [stripe_event(f"evt_stall_{i}") for i in range(20)]
                assert await post_each_on_its_own_connection(proc.url + STRIPE, bodies,
                                                             timeout=3.0) == [200] * 20
                assert await health(client, proc) \
                    == (200, {"status": "ok", "workers_vacant": [1]})
            assert await proc.wait(timeout=10 * timeout + 10) == 1
        finally:  # the stalled worker first: it holds the supervisor's stderr open
            for pid in [e["pid"] for e in proc.logs
                        if e.get("event") == "worker_start_stalled_by_test"]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            await proc.kill()
    finally:
        await stub.stop()
    took = time.monotonic() - started
    print(f"a worker stalled at start: given up on {took:.2f} s after it stalled")
    failed = [e for e in proc.logs if e.get("event") == "worker_start_failed"]
    assert [(e["worker"], e["cause"], e["action"]) for e in failed] \
        == [(1, "start_timeout", "stop_group")]
    assert failed[0]["timeout_s"] == 10 * timeout
    assert took < 10 * timeout + 5
    assert [e["exit_code"] for e in proc.logs if e.get("event") == "stopped"
            and "worker" not in e] == [1]


async def test_each_seat_queues_up_to_somaxconn_connections(quick_group: Deployment) -> None:
    """A seat's accept queue holds what the kernel allows (``SOMAXCONN``, capped by
    net.core.somaxconn), not asyncio's default of 100: connections that arrive while a worker
    is silent wait there for its successor."""
    if shutil.which("ss") is None:
        pytest.skip("needs ss (iproute2) to read a listening socket's backlog")
    await quick_group.start(1)
    proc = quick_group.procs[0]
    port = proc.listen.rsplit(":", 1)[1]
    ss = await asyncio.create_subprocess_exec("ss", "-Hltn", f"sport = :{port}",
                                              stdout=asyncio.subprocess.PIPE)
    out, _ = await ss.communicate()
    backlogs = [int(line.split()[2]) for line in out.decode().splitlines() if line.strip()]
    assert backlogs == [min(socket.SOMAXCONN, somaxconn())] * WORKERS


def somaxconn() -> int:
    """The kernel's cap on a listening socket's backlog."""
    return int(Path("/proc/sys/net/core/somaxconn").read_text())


async def test_the_workers_die_with_the_supervisor_a_stopped_one_too(
    quick_group: Deployment,
) -> None:
    """The supervisor SIGKILLed (the OOM killer, kill -9) while worker 1 is stopped: every
    worker dies with it (PR_SET_PDEATHSIG), the stopped one too, which could never read its
    channel's end of file; no orphan keeps a socket on the port, so a new connection is
    refused rather than queued for no one."""
    await quick_group.start(1)
    proc = quick_group.procs[0]
    assert proc.proc is not None
    pids = next(e["pids"] for e in proc.logs if e.get("event") == "listening")
    port = int(proc.listen.rsplit(":", 1)[1])
    os.kill(pids[1], signal.SIGSTOP)
    started = time.monotonic()
    proc.proc.kill()
    await until(lambda: not any(running(pid) for pid in pids), timeout=5)
    print(f"supervisor killed: its workers gone {time.monotonic() - started:.3f} s later")
    await proc.wait(timeout=5)
    quick_group.procs = []
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


async def test_sigint_while_a_replacement_starts_stops_the_group_cleanly(
    quick_group: Deployment,
) -> None:
    """Ctrl-C reaches every process of the group. A worker still starting ignores it (the
    supervisor stops the group): it starts, and the group stops as on SIGTERM — exit 0, no
    worker failed, no traceback."""
    gate = quick_group.tmp / "stall"
    proc = await ProxyProcess(write_config(quick_group.tmp, quick_group.config),
                              env=hooks(STALL_START_WORKER="1",
                                        STALL_START_WHILE=str(gate))).start()
    quick_group.procs = [proc]
    assert proc.proc is not None
    pids = next(e["pids"] for e in proc.logs if e.get("event") == "listening")
    gate.touch()
    os.kill(pids[1], signal.SIGSTOP)
    stalled = await proc.wait_for_log("worker_start_stalled_by_test", timeout=20.0)
    os.kill(stalled["pid"], signal.SIGINT)  # while it starts…
    gate.unlink()  # …then let it go on
    try:
        replaced = await proc.wait_for_log("worker_replaced", timeout=20.0)
    except TimeoutError:
        pytest.fail("the worker did not start after SIGINT:\n" + "\n".join(proc.raw_logs[-8:]))
    assert replaced["pid"] == stalled["pid"]
    for pid in (proc.proc.pid, pids[0], replaced["pid"]):
        os.kill(pid, signal.SIGINT)
    assert await proc.wait(timeout=20) == 0
    quick_group.procs = []
    assert not [e for e in proc.logs if e.get("event") in ("worker_failed", "worker_exited")]
    assert not any("Traceback" in line for line in proc.raw_logs)
