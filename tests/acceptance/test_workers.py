"""``workers: 2``: one supervisor and two worker processes on one listening port, on SQLite and
on PostgreSQL. Connections reach both workers; each event still reaches the app once; /metrics
sums the workers; the admin listener and the store upkeep run once; SIGTERM drains the group
within shutdown_timeout + 2 s; a worker killed stops the group with a non-zero exit; a
supervisor killed takes its workers with it."""

from __future__ import annotations

import asyncio
import contextlib
import os
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

from sidecar.app import SHUTDOWN_OVERRUN
from tests.acceptance.conftest import Deployment, deploy
from tests.support import (
    REPO,
    ProxyProcess,
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
    """Whether ``pid`` runs: neither gone nor a zombie (an orphan waits for init to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def deliveries(proc: ProxyProcess) -> list[dict[str, Any]]:
    return [e for e in proc.logs if e.get("event") == "delivery"]


async def post_each_on_its_own_connection(url: str, bodies: list[bytes]) -> list[int]:
    """Every body at once, each on a new connection (the kernel picks a worker per
    connection)."""
    connector = aiohttp.TCPConnector(force_close=True, limit=0)
    async with aiohttp.ClientSession(connector=connector) as client:
        answers = await asyncio.gather(*(post(client, url, body, stripe_headers(body))
                                         for body in bodies))
    return [status for status, _, _ in answers]


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
        await conn.execute("UPDATE webhook_event SET received_at = received_at - "
                           "interval '3650 days'")
        await conn.execute("CREATE FUNCTION refuse_delete() RETURNS trigger LANGUAGE plpgsql "
                           "AS $$ BEGIN RAISE EXCEPTION 'retention refused by the test'; END $$")
        await conn.execute("CREATE TRIGGER keep BEFORE DELETE ON webhook_event "
                           "FOR EACH ROW EXECUTE FUNCTION refuse_delete()")
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


async def test_the_workers_stop_when_the_supervisor_is_killed(group: Deployment) -> None:
    await group.start(1)
    proc = group.procs[0]
    assert proc.proc is not None
    pids = next(e["pids"] for e in proc.logs if e.get("event") == "listening")
    proc.proc.kill()
    # The workers share the supervisor's stderr: it reaches end of file when they are gone.
    await proc.wait(timeout=10.0 + SHUTDOWN_OVERRUN + 5)
    group.procs = []
    gone = sorted(e["worker"] for e in proc.logs if e.get("event") == "supervisor_gone")
    assert gone == [0, 1]
    assert sorted(e["worker"] for e in proc.logs if e.get("event") == "stopped") == [0, 1]
    # A process closes its files before it is a zombie: its stderr's end of file comes first.
    await until(lambda: not any(running(pid) for pid in pids), timeout=5)


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
