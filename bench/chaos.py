"""Chaos suite: two proxy replicas share a private PostgreSQL cluster while a fault is injected
under light load, and a simulated provider redelivers anything not answered 2xx. After
quiescence the whole history is checked against the invariants in ``bench.invariants``; a
violated invariant makes the command exit 1 and names itself.

    .venv/bin/python -m bench.chaos [--scenario NAME]... [--runs N] [--break NAME]
                                    [--write-docs] [--seconds S] [--rate R]

Scenarios (each on its own throwaway cluster, started with initdb/pg_ctl on a free port):
db-hang, backend-kills, db-crash, row-locks, upstream-faults, gzip-flood, and for a queue-mode
provider queue-kill-accept and queue-kill-forward (replicas SIGKILLed and restarted). Loopback only,
bounded: each run sends for --seconds, every event is given up --give-up seconds after its
first delivery, and the clusters, proxies and fault proxy are torn down in ``finally`` blocks.
See docs/chaos.md for the method, the invariants and the latest results.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import functools
import gzip
import json
import os
import random
import signal
import socket
import sys
import tempfile
import time
import traceback
import zlib
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
from aiohttp import web

from bench import sabotage
from bench.chaosreport import (
    DOCS,
    Outcome,
    report,
    results_markdown,
    summary,
    table,
    write_docs,
)
from bench.common import signer
from bench.faultproxy import Fault, FaultProxy
from bench.invariants import (
    Delivery,
    ForwardLog,
    History,
    Kill,
    Kind,
    Receipt,
    Row,
    check,
    is_2xx,
    retryable,
    tally,
)
from sidecar.config.loader import parse_config
from sidecar.config.model import Config, Mode
from tests.pgserver import ThrowawayCluster, create_database
from tests.support import (
    REPO,
    ProxyProcess,
    Seen,
    StubApp,
    base_config,
    stripe_event,
    stripe_headers,
    write_config,
)

DATABASE = "sidecar_chaos"
APPLICATION_NAME = "webhook-sidecar"  # what the proxy's pool sets (sidecar/store/postgres.py)

# The answer bound, from the config. Before forwarding, a delivery makes at most
# CALLS_BEFORE_FORWARD store calls outside its in-flight wait (the claim, its re-read, a
# take-over), each bounded by acquire_timeout + statement_timeout + 1 s (the margin asyncpg's
# command_timeout adds, sidecar/app.py). Then the forward and the result write: together at
# most the lease (the write is retried only until just before the lease ends, which began at
# the claim), or upstream.timeout plus one store call, whichever is longer. Plus SLACK for
# scheduling on a shared machine.
CALLS_BEFORE_FORWARD = 3
CALLS_TO_ACCEPT = 2  # queue mode: the enqueue and, for a redelivery, the existing row's read
COMMAND_TIMEOUT_MARGIN = 1.0
SLACK = 1.0
BACKOFF = (0.25, 0.5, 1.0, 2.0, 3.0)  # the provider's redelivery schedule; the last repeats


@dataclass(frozen=True, slots=True)
class Settings:
    seconds: float = 20.0  # how long new events are sent
    rate: float = 10.0  # new events per second
    give_up: float = 30.0  # an event is redelivered until 2xx or this long after its first try
    duplicate_share: float = 0.1  # events whose first delivery goes to both replicas at once
    lock_hold: float = 3.0  # row-locks: > the proxies' lock_timeout (300ms); 3 s = lease - 1 s


DEFAULTS = Settings()


def proxy_config(upstream_url: str, dsn: str, queue: bool = False) -> dict[str, Any]:
    """Two replicas, one provider, short bounds so faults show within seconds. ``queue``: the
    provider in queue mode, retrying fast (a dead replica's events are taken again after the
    lease)."""
    config = base_config(upstream_url, dsn)
    config["providers"] = {"stripe": config["providers"]["stripe"]}  # lease 4s, wait 1s
    if queue:
        config["providers"]["stripe"].update({
            "mode": "queue", "queue": {"first_retry": "200ms", "max_retry_delay": "1s",
                                       "poll_interval": "250ms"}})
    config["upstream"] = {"url": upstream_url, "timeout": "2s", "connect_timeout": "1s"}
    config["store"] = {"url": dsn, "pool_max_size": 5, "acquire_timeout": "500ms",
                       "statement_timeout": "500ms", "lock_timeout": "300ms"}
    config["shutdown_timeout"] = "5s"
    config["body_read_timeout"] = "5s"
    return config


def answer_bound(config: Config) -> float:
    store = config.store
    call = store.acquire_timeout + store.statement_timeout + COMMAND_TIMEOUT_MARGIN
    if all(p.mode is Mode.QUEUE for p in config.providers):  # answered once stored
        return CALLS_TO_ACCEPT * call + SLACK
    wait = max(p.inflight_wait for p in config.providers)
    lease = max(p.lease for p in config.providers)
    return (wait + CALLS_BEFORE_FORWARD * call + max(config.upstream.timeout + call, lease)
            + SLACK)


# -- the app -----------------------------------------------------------------------------------

_receipt: contextvars.ContextVar[Receipt] = contextvars.ContextVar("receipt")


class RecordingApp(StubApp):
    """The app: records every request as it arrives (before its body is read, so a request
    that reaches the app but is never completed still counts) and what it answered. Its port
    is bound from the start but listens only from :meth:`start`: until then connections are
    refused, as to an app that is down."""

    def __init__(self, clock: Callable[[], float], delay: tuple[float, float],
                 close: bool) -> None:
        super().__init__()
        self.clock = clock
        self.delay = delay
        self.close = close  # answer Connection: close, so that a connection is one request
        self.receipts: list[Receipt] = []
        self.behaviour = self._answer
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))  # bound, not listening: refused until start()
        self.port = self.sock.getsockname()[1]

    async def start(self) -> RecordingApp:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.SockSite(self._runner, self.sock).start()
        return self

    async def stop(self) -> None:
        await super().stop()
        self.sock.close()

    def in_flight(self) -> int:
        return sum(1 for r in self.receipts if r.answered is None)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        receipt = Receipt(request.headers.get("X-Webhook-Sidecar-Event-Id", ""),
                          int(request.headers.get("X-Webhook-Sidecar-Attempt", "0")),
                          self.clock())
        self.receipts.append(receipt)
        _receipt.set(receipt)
        return await super()._handle(request)

    async def _answer(self, seen: Seen) -> web.StreamResponse:
        await asyncio.sleep(random.uniform(*self.delay))
        response = web.json_response({"ok": True, "event": seen.event_id,
                                      "attempt": seen.attempt, "note": "processed " * 8})
        if self.close:
            response.force_close()
        receipt = _receipt.get()
        receipt.status, receipt.answered = response.status, self.clock()
        return response


# -- the provider ------------------------------------------------------------------------------

Make = Callable[[], tuple[bytes, dict[str, str]]]


class Provider:
    """Delivers events to random replicas and redelivers until 2xx (bounded), recording every
    delivery."""

    def __init__(self, client: aiohttp.ClientSession, urls: Sequence[str],
                 clock: Callable[[], float], settings: Settings, rng: random.Random) -> None:
        self.client = client
        self.urls = urls
        self.clock = clock
        self.settings = settings
        self.rng = rng
        self.kinds: dict[str, Kind] = {}
        self.deliveries: list[Delivery] = []

    async def post(self, event_id: str, kind: Kind, replica: int, body: bytes,
                   headers: dict[str, str]) -> Delivery:
        sent = self.clock()
        status: int | None = None
        error: str | None = None
        try:
            async with self.client.post(self.urls[replica] + "/webhooks/stripe", data=body,
                                        headers=headers) as resp:
                await resp.read()
                status = resp.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            error = type(exc).__name__
        delivery = Delivery(event_id, kind, replica, sent, self.clock() - sent, status, error)
        self.deliveries.append(delivery)
        return delivery

    async def event(self, event_id: str, kind: Kind, make: Make,
                    duplicate: bool = False) -> None:
        self.kinds[event_id] = kind
        give_up = self.clock() + self.settings.give_up
        for round_ in range(10_000):
            body, headers = make()  # signed afresh: a redelivery carries a new timestamp
            replicas = (self.rng.sample(range(len(self.urls)), 2) if duplicate and round_ == 0
                        else [self.rng.randrange(len(self.urls))])
            got = await asyncio.gather(*(self.post(event_id, kind, r, body, headers)
                                         for r in replicas))
            if any(is_2xx(d.status) for d in got) or not any(retryable(d.status) for d in got):
                return
            pause = BACKOFF[min(round_, len(BACKOFF) - 1)]
            if kind is Kind.BOMB or self.clock() + pause > give_up:
                return
            await asyncio.sleep(pause)


def normal(event_id: str) -> Make:
    body = stripe_event(event_id)
    return lambda: (body, stripe_headers(body))


def fixed(body: bytes, headers: dict[str, str]) -> Make:
    return lambda: (body, headers)


def gzipped(event_id: str) -> Make:
    """Signed over the JSON (the payload), sent compressed with Content-Encoding: gzip."""
    body = stripe_event(event_id, data={"object": {"lines": ["item"] * 200}})
    packed = gzip.compress(body)
    return lambda: (packed, {**stripe_headers(body), "Content-Encoding": "gzip"})


@functools.cache
def gzip_bomb(event_id: str, size: int = 1_000_000) -> bytes:
    """About ``size`` bytes of gzip that inflate to about 1000 times as much: a JSON object
    followed by whitespace (still valid JSON, so a proxy that inflates it finds an event id)."""
    squeeze = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: a gzip container
    parts = [squeeze.compress(json.dumps({"id": event_id, "object": "event"}).encode())]
    spaces = b" " * (1 << 20)
    total = sum(map(len, parts))
    while total < size - 2048:
        chunk = squeeze.compress(spaces)
        parts.append(chunk)
        total += len(chunk)
    parts.append(squeeze.flush())
    return b"".join(parts)


# -- one run -----------------------------------------------------------------------------------


@dataclass
class Run:
    """Everything one scenario run owns; torn down by :func:`deployed`."""

    scenario: Scenario
    settings: Settings
    rng: random.Random
    t0: float = field(default_factory=time.monotonic)
    cluster: ThrowawayCluster | None = None
    dsn: str = ""
    app: RecordingApp | None = None
    fault_proxy: FaultProxy | None = None
    replicas: list[ProxyProcess] = field(default_factory=list)
    urls: list[str] = field(default_factory=list)  # where the provider reaches each replica
    config_path: Path | None = None
    retired: list[tuple[int, ProxyProcess]] = field(default_factory=list)  # killed replicas
    kills: list[Kill] = field(default_factory=list)
    config: Config | None = None
    provider: Provider | None = None
    faults: Counter[str] = field(default_factory=Counter)
    faulting: bool = False  # the fault proxy injects faults only while this is set
    senders: list[asyncio.Task[None]] = field(default_factory=list)

    def clock(self) -> float:
        return time.monotonic() - self.t0

    async def at(self, offset: float) -> None:
        """Sleep until ``offset`` seconds into the run."""
        await asyncio.sleep(max(0.0, offset - self.clock()))

    def send(self, event_id: str, kind: Kind, make: Make, duplicate: bool = False) -> None:
        assert self.provider is not None
        self.senders.append(asyncio.create_task(
            self.provider.event(event_id, kind, make, duplicate)))

    async def connect(self, name: str) -> asyncpg.Connection:
        return await asyncpg.connect(self.dsn, timeout=5,
                                     server_settings={"application_name": name})


@contextlib.asynccontextmanager
async def deployed(run: Run, tmp: Path) -> Any:
    """A private cluster, the app (behind the fault proxy if the scenario has one) and two
    replicas; all stopped on the way out, whatever happened."""
    scenario = run.scenario
    cluster = run.cluster = ThrowawayCluster(Path(tmp) / "pg", fsync=scenario.fsync)
    try:
        await asyncio.to_thread(cluster.start)
        run.dsn = await create_database(cluster.dsn, DATABASE)
        app = run.app = RecordingApp(run.clock, scenario.app_delay,
                                     close=scenario.fault_proxy is not None)
        if not scenario.app_down:
            await app.start()
        upstream = app.url
        if scenario.fault_proxy is not None:
            choose = scenario.fault_proxy(run)
            run.fault_proxy = await FaultProxy(app.port, choose).start()
            upstream = run.fault_proxy.url
        config = proxy_config(upstream, run.dsn, queue=scenario.queue)
        run.config = parse_config(config, env={})
        path = run.config_path = write_config(tmp, config)
        await migrate(path)
        run.replicas = [ProxyProcess(path), ProxyProcess(path)]
        await asyncio.gather(*(replica.start() for replica in run.replicas))
        run.urls = [replica.url for replica in run.replicas]
        yield run
    finally:
        for replica in run.replicas:
            await stop_replica(replica)
        if run.fault_proxy is not None:
            await run.fault_proxy.stop()
        if run.app is not None:
            await run.app.stop()
        await asyncio.to_thread(cluster.cleanup)


async def migrate(path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "sidecar", "migrate", "--config", str(path), cwd=str(REPO),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    if proc.returncode != 0:
        raise RuntimeError(f"migrate failed: {err.decode(errors='replace')}")


async def stop_replica(replica: ProxyProcess) -> None:
    if replica.proc is None or replica.proc.returncode is not None:
        return
    try:
        await replica.terminate(timeout=15)
    except TimeoutError:
        await replica.kill()


async def load(run: Run) -> None:
    """New events at ``rate`` for ``seconds``; a share of them delivered twice at once."""
    settings = run.settings
    count = int(settings.seconds * settings.rate)
    for n in range(count):
        await run.at(n / settings.rate)
        event_id = f"evt_{n:05d}"
        run.send(event_id, Kind.NORMAL, normal(event_id),
                 duplicate=run.rng.random() < settings.duplicate_share)


async def kill_replica(run: Run, index: int) -> None:
    """SIGKILL replica ``index`` (no cleanup: forwards in flight and unwritten results die with
    it), then start a replacement on the same config, as a supervisor would; the provider
    reaches the new one at its new address. Its logs stay in ``run.retired``."""
    assert run.config_path is not None and run.app is not None
    at = run.clock()
    run.faults["app requests in flight at the kills"] += run.app.in_flight()
    old = run.replicas[index]
    run.kills.append(Kill(index, at))
    await old.kill()
    run.faults["replicas killed"] += 1
    run.retired.append((index, old))
    fresh = run.replicas[index] = ProxyProcess(run.config_path)  # stopped on the way out
    await fresh.start()
    run.urls[index] = fresh.url
    run.kills[-1] = Kill(index, at, run.clock())


async def quiesce(run: Run) -> list[Row]:
    """After the provider stopped: wait (bounded) until no lease is live — in queue mode, until
    the queue is delivered, within the provider's give-up time — then read the rows."""
    assert run.config is not None
    lease = max(p.lease for p in run.config.providers)
    conn = await run.connect("chaos-checker")
    try:
        for _ in range(int((lease + run.settings.give_up) / 0.25) if run.scenario.queue
                       else 0):
            waiting = await conn.fetchval("SELECT count(*) FROM webhook_event "
                                          "WHERE state IN ('queued', 'processing')")
            if not waiting:
                break
            await asyncio.sleep(0.25)
        for _ in range(int((lease + 2) / 0.25)):
            live = await conn.fetchval("SELECT count(*) FROM webhook_event WHERE state = "
                                       "'processing' AND lease_until > clock_timestamp()")
            if not live:
                break
            await asyncio.sleep(0.25)
        records = await conn.fetch(
            "SELECT event_id, state, attempt, "
            "coalesce(lease_until <= clock_timestamp(), true) AS expired FROM webhook_event")
    finally:
        await conn.close()
    return [Row(r["event_id"], r["state"], r["attempt"], r["expired"]) for r in records]


# Queue mode: a delivery worker's line per try, and its settlement that could not be written.
QUEUE_TRIES = ("queue_delivery", "queue_dead")
QUEUE_UNWRITTEN = "queue_record_failed"


def from_logs(replicas: Sequence[tuple[int, ProxyProcess]],
              ) -> tuple[list[ForwardLog], list[str], list[str]]:
    """Per forward, what the replicas (each with its index; a killed replica and its
    replacement share one) logged: delivery lines that forwarded, failed result writes,
    superseded results, queue workers' tries; the log lines of unexpected errors; other
    notes."""
    forwards: list[ForwardLog] = []
    errors: list[str] = []
    notes: list[str] = []
    for index, replica in replicas:
        for entry in replica.logs:
            event, event_id, attempt = (entry.get("event"), entry.get("event_id"),
                                        entry.get("attempt"))
            if event == "sabotage":
                notes.append(f"replica {index}: sabotaged build ({entry.get('name')})")
            unexpected = entry.get("result") == "error" or (
                entry.get("level") in ("error", "critical")
                and event not in ("record_failed", QUEUE_UNWRITTEN))
            if unexpected:
                cause = str(entry.get("exception") or entry.get("error") or "").strip()
                cause = cause.splitlines()[-1] if cause else ""
                errors.append(f"replica {index}: {event} {event_id or ''} {cause}".strip())
                if isinstance(event_id, str) and event in ("delivery", "queue_delivery_crashed"):
                    forwards.append(ForwardLog(event_id, attempt or 0, index,
                                               entry.get("status"), error=cause or "error"))
                    continue
            if not isinstance(event_id, str) or not isinstance(attempt, int):
                continue
            if event == "delivery" and ({"upstream_ms", "upstream_error", "record_error"}
                                        & entry.keys()):
                forwards.append(ForwardLog(event_id, attempt, index, entry.get("status"),
                                           entry.get("upstream_error"),
                                           entry.get("record_error"),
                                           bool(entry.get("superseded"))))
            elif event == "record_failed":
                forwards.append(ForwardLog(event_id, attempt, index,
                                           record_error=str(entry.get("error"))))
            elif event == "attempt_superseded":
                forwards.append(ForwardLog(event_id, attempt, index, superseded=True))
            elif event in QUEUE_TRIES and entry.get("result") != "unreachable":
                # (an unreachable try is no attempt: the app was not connected to, and the
                # attempt number is given back for the next try)
                answered = entry.get("app_status_class") not in (None, "none")
                forwards.append(ForwardLog(
                    event_id, attempt, index,
                    upstream_error=None if answered else entry.get("upstream_error"),
                    superseded=entry.get("result") == "superseded"))
            elif event == QUEUE_UNWRITTEN:
                forwards.append(ForwardLog(event_id, attempt, index,
                                           record_error="settlement not written"))
        stray = [line for line in replica.raw_logs if not line.startswith("{")]
        if stray:
            notes.append(f"replica {index}: {len(stray)} non-JSON stderr lines, e.g. "
                         f"{stray[-1][:160]!r}")
    return forwards, errors, notes


async def run_once(scenario: Scenario, settings: Settings, number: int,
                   seed: int) -> Outcome:
    run = Run(scenario, settings, random.Random(seed))
    started = time.monotonic()
    deaths: list[str] = []
    with tempfile.TemporaryDirectory(prefix="sidecar-chaos-") as tmp:
        async with deployed(run, Path(tmp)) as run:
            assert run.config is not None
            bound = answer_bound(run.config)
            timeout = aiohttp.ClientTimeout(total=bound + 5)
            connector = aiohttp.TCPConnector(limit=0)
            async with aiohttp.ClientSession(timeout=timeout, connector=connector) as client:
                run.provider = Provider(client, run.urls, run.clock, settings, run.rng)
                run.t0 = time.monotonic()
                fault = asyncio.create_task(scenario.inject(run))
                try:
                    await load(run)
                    await fault
                    await asyncio.gather(*run.senders)
                finally:
                    fault.cancel()
                    for task in run.senders:
                        task.cancel()
                    await asyncio.gather(fault, *run.senders, return_exceptions=True)
            rows = await quiesce(run)
            for index, replica in enumerate(run.replicas):
                if replica.proc is not None and replica.proc.returncode is not None:
                    deaths.append(f"replica {index} exited {replica.proc.returncode}")
        if run.fault_proxy is not None:
            run.faults.update({str(k): v for k, v in run.fault_proxy.counts.items()
                               if k is not Fault.PASS})
        forwards, errors, notes = from_logs([*run.retired, *enumerate(run.replicas)])
        for index, replica in enumerate(run.replicas):
            code = replica.proc.returncode if replica.proc is not None else None
            if code not in (0, None):
                notes.append(f"replica {index} ended with exit code {code}")
    assert run.provider is not None and run.app is not None
    history = History(kinds=run.provider.kinds, deliveries=run.provider.deliveries,
                      receipts=run.app.receipts, forwards=forwards, rows=rows, bound=bound,
                      faults=dict(run.faults), expect_fault=scenario.expect_fault,
                      proxy_errors=errors, replica_deaths=deaths, kills=run.kills,
                      queued=scenario.queue)
    if scenario.queue:
        first: dict[str, Receipt] = {}
        for receipt in sorted(run.app.receipts, key=lambda r: r.arrived):
            first.setdefault(receipt.event_id, receipt)
        numbers = Counter(r.attempt for r in first.values())
        notes.append("attempt number of each event's first request at the app: "
                     + ", ".join(f"{n}: {count}" for n, count in sorted(numbers.items()))
                     + " (above 1: a killed worker had taken it)")
    return Outcome(scenario.name, number, time.monotonic() - started, history,
                   check(history), tally(history), notes)


# -- the scenarios -----------------------------------------------------------------------------

HANG_AT, HANG_FOR = 4.0, 15.0  # longer than the answer bound: a hung request shows
CRASH_AT, CRASH_DOWN = 6.0, 5.0


async def db_hang(run: Run) -> None:
    """SIGSTOP the postmaster and every backend for HANG_FOR seconds, then SIGCONT (also when
    the run is cancelled: ``paused`` continues them on the way out)."""
    assert run.cluster is not None
    await run.at(HANG_AT)
    processes = len(run.cluster.pids())
    with run.cluster.paused():
        run.faults["processes stopped"] = processes
        await asyncio.sleep(HANG_FOR)
    run.faults["seconds stopped"] = int(HANG_FOR)


async def backend_kills(run: Run) -> None:
    """pg_terminate_backend on one or two of the proxies' connections every 0.3 to 1 s, filtered
    by database and application name."""
    conn = await run.connect("chaos-killer")
    try:
        await run.at(3.0)
        while run.clock() < run.settings.seconds - 3:
            await asyncio.sleep(run.rng.uniform(0.3, 1.0))
            pids = await conn.fetch(
                "SELECT pid FROM pg_stat_activity WHERE datname = $1 "
                "AND application_name LIKE $2 AND pid <> pg_backend_pid()",
                DATABASE, APPLICATION_NAME + "%")
            for record in run.rng.sample(pids, min(len(pids), run.rng.randint(1, 2))):
                if await conn.fetchval("SELECT pg_terminate_backend($1)", record["pid"]):
                    run.faults["backends terminated"] += 1
    finally:
        await conn.close()


async def db_crash(run: Run) -> None:
    """pg_ctl stop -m immediate (a crash: no checkpoint), down CRASH_DOWN seconds, start."""
    cluster = run.cluster
    assert cluster is not None
    await run.at(CRASH_AT)
    try:
        await asyncio.to_thread(cluster.stop, "immediate")
        run.faults["crashes"] += 1
        await asyncio.sleep(CRASH_DOWN)
    finally:
        await asyncio.to_thread(cluster.start)
    run.faults["restarts"] += 1


async def row_locks(run: Run) -> None:
    """Another session holds SELECT … FOR UPDATE on up to 4 in-flight or failed rows for
    ``lock_hold`` seconds, again and again; each row is locked once (a row whose result write
    is being retried stays in flight: locking it again would make one lock of any length)."""
    conn = await run.connect("chaos-locker")
    locked: list[str] = []
    try:
        await run.at(3.0)
        hold = run.settings.lock_hold
        while run.clock() < run.settings.seconds - hold - 1:
            with contextlib.suppress(asyncpg.PostgresError):
                async with conn.transaction():
                    await conn.execute("SET LOCAL lock_timeout = '500ms'")
                    rows = await conn.fetch(
                        "SELECT event_id FROM webhook_event WHERE provider = 'stripe' "
                        "AND state IN ('processing', 'failed') AND event_id <> ALL($1::text[]) "
                        "ORDER BY random() LIMIT 4 FOR UPDATE SKIP LOCKED", locked)
                    locked += [r["event_id"] for r in rows]
                    run.faults["rows locked"] += len(rows)
                    await asyncio.sleep(hold)
            await asyncio.sleep(0.5)
    finally:
        await conn.close()


def upstream_chooser(run: Run) -> Callable[[], Fault]:
    """While the run is faulting, 30 % of the connections to the app get a fault."""
    faults = [Fault.BLACKHOLE, Fault.RESET_REQUEST, Fault.RESET_ANSWER, Fault.SLOW_BODY]

    def choose() -> Fault:
        if run.faulting and run.rng.random() < 0.3:
            return run.rng.choice(faults)
        return Fault.PASS

    return choose


async def upstream_faults(run: Run) -> None:
    await run.at(2.0)
    run.faulting = True
    try:
        await run.at(run.settings.seconds - 2)
    finally:
        run.faulting = False


async def gzip_flood(run: Run) -> None:
    """Gzip-compressed events at 8/s beside the normal load, and three 1 MB gzip bombs."""
    bombs = {round(run.settings.seconds * share * 8) for share in (0.2, 0.45, 0.7)}
    make_bomb = signer(proxy_config("http://unused", "postgresql://unused"))
    for n in range(int(run.settings.seconds * 8)):
        await run.at(n / 8)
        if n in bombs:  # one bomb, made once (it takes seconds), sent three times
            body = await asyncio.to_thread(gzip_bomb, "bomb")
            run.send("bomb", Kind.BOMB,
                     fixed(body, {**make_bomb(body), "Content-Encoding": "gzip"}))
            run.faults["bombs"] += 1
        else:
            run.send(f"gz_{n:04d}", Kind.GZIP, gzipped(f"gz_{n:04d}"))
            run.faults["gzip events"] += 1


KILL_EVERY = (1.0, 2.0)  # seconds between SIGKILLs in queue-kill-accept
KILL_EVERY_FORWARDING = (1.5, 3.0)  # in queue-kill-forward
APP_DOWN_SHARE = 0.6  # queue-kill-accept: the app is down for this share of the sending time


async def queue_kill_accept(run: Run) -> None:
    """The app is down for the first 60 % of the sending time while a random replica is
    SIGKILLed (and restarted) every 1 to 2 s: kills land on deliveries being accepted and on
    events waiting in the queue (their workers probing the app, rows taken then given back).
    Then the app comes up and the queue drains, without further kills."""
    assert run.app is not None
    up_at = run.settings.seconds * APP_DOWN_SHARE
    await run.at(1.0)
    while run.clock() + KILL_EVERY[1] < up_at:
        await asyncio.sleep(run.rng.uniform(*KILL_EVERY))
        await kill_replica(run, run.rng.randrange(len(run.replicas)))
    await run.at(up_at)
    await run.app.start()
    run.faults["seconds the app was down"] = round(up_at)


async def queue_kill_forward(run: Run) -> None:
    """The app works 0.3 to 1 s per request, so a few forwards are always in flight; from 2 s
    until 3 s before the end a random replica is SIGKILLed (and restarted) every 1.5 to 3 s,
    mid-forward: its events are taken again after the lease, as attempt + 1."""
    await run.at(2.0)
    while run.clock() + KILL_EVERY_FORWARDING[1] < run.settings.seconds - 3:
        await asyncio.sleep(run.rng.uniform(*KILL_EVERY_FORWARDING))
        await kill_replica(run, run.rng.randrange(len(run.replicas)))


async def no_fault(run: Run) -> None:
    """A control run: the same load with nothing injected; every invariant must hold."""


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    title: str
    inject: Callable[[Run], Coroutine[Any, Any, None]]
    app_delay: tuple[float, float] = (0.0, 0.05)
    fsync: bool = False  # only a cluster that is crashed needs it
    fault_proxy: Callable[[Run], Callable[[], Fault]] | None = None
    expect_fault: bool = True
    queue: bool = False  # the provider in queue mode
    app_down: bool = False  # the app listens only when the scenario starts it


# The app works longer where the fault must catch attempts in flight (claimed, forwarded, not
# yet recorded): at 10 events/s, 100-500 ms of work keeps about three in flight at any time.
IN_FLIGHT = (0.1, 0.5)

SCENARIOS = {s.name: s for s in (
    Scenario("db-hang", f"database hang: SIGSTOP postmaster + backends {HANG_FOR:g} s", db_hang,
             app_delay=IN_FLIGHT),
    Scenario("backend-kills", "pg_terminate_backend on the proxies' connections at random",
             backend_kills, app_delay=IN_FLIGHT),
    Scenario("db-crash", f"pg_ctl stop -m immediate, restart after {CRASH_DOWN:g} s", db_crash,
             app_delay=IN_FLIGHT, fsync=True),
    Scenario("row-locks", "SELECT … FOR UPDATE held on in-flight rows (--lock-hold)",
             row_locks, app_delay=(0.2, 0.6)),
    Scenario("upstream-faults", "fault proxy to the app: black hole, resets, slow body",
             upstream_faults, fault_proxy=upstream_chooser),
    Scenario("gzip-flood", "gzip bodies at 8/s and three 1 MB gzip bombs beside the load",
             gzip_flood),
    Scenario("queue-kill-accept", "queue mode, app down at first: SIGKILL a replica every "
             "1–2 s while events are accepted and wait", queue_kill_accept, queue=True,
             app_down=True),
    Scenario("queue-kill-forward", "queue mode: SIGKILL a replica every 1.5–3 s while its "
             "forwards are in flight", queue_kill_forward, app_delay=(0.3, 1.0), queue=True),
)}
CONTROL = Scenario("control", "no fault: the same load as a baseline", no_fault,
                   expect_fault=False)


# -- command line ------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos",
                                     description=(__doc__ or "").split("\n\n")[0])
    names = [*SCENARIOS, CONTROL.name]
    parser.add_argument("--scenario", action="append", choices=names,
                        help=f"run only these (repeatable; default: all {len(SCENARIOS)})")
    parser.add_argument("--runs", type=int, default=1, help="runs of each scenario")
    parser.add_argument("--break", dest="break_", metavar="NAME[,NAME]",
                        help="run the replicas as a deliberately broken build: "
                             + ", ".join(sabotage.BREAKS))
    parser.add_argument("--write-docs", action="store_true",
                        help=f"replace the results block in {DOCS.relative_to(REPO)}")
    parser.add_argument("--seconds", type=float, default=DEFAULTS.seconds)
    parser.add_argument("--rate", type=float, default=DEFAULTS.rate)
    parser.add_argument("--give-up", type=float, default=DEFAULTS.give_up)
    parser.add_argument("--duplicate-share", type=float, default=DEFAULTS.duplicate_share)
    parser.add_argument("--lock-hold", type=float, default=DEFAULTS.lock_hold,
                        help="row-locks: seconds each lock is held")
    parser.add_argument("--seed", type=int, help="seed of the run's randomness (default: random)")
    parser.add_argument("--verbose", action="store_true", help="list every repeat")
    args = parser.parse_args(argv)
    if not 1 <= args.runs <= 20:
        parser.error("--runs must be between 1 and 20")
    if not 5 <= args.seconds <= 60 or not 0 < args.rate <= 50:
        parser.error("--seconds must be 5–60 and --rate at most 50 (keep the load light)")
    if not 0.5 <= args.lock_hold <= 10:
        parser.error("--lock-hold must be 0.5–10 seconds")
    if args.break_ is not None:
        try:
            sabotage.names(args.break_)
        except ValueError as exc:
            parser.error(str(exc))
    return args


@contextlib.contextmanager
def broken_build(name: str | None) -> Iterator[None]:
    """With ``--break``: the sabotage's environment for every child process, then restored."""
    if name is None:
        yield
        return
    saved = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="sidecar-chaos-break-") as tmp:
        os.environ.update(sabotage.install(Path(tmp), name))
        try:
            yield
        finally:
            os.environ.clear()
            os.environ.update(saved)


async def main_async(args: argparse.Namespace) -> int:
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    settings = Settings(seconds=args.seconds, rate=args.rate, give_up=args.give_up,
                        duplicate_share=args.duplicate_share, lock_hold=args.lock_hold)
    chosen = [SCENARIOS.get(name) or CONTROL for name in (args.scenario or SCENARIOS)]
    seeds = random.Random(args.seed)
    outcomes: list[Outcome] = []
    broken: list[str] = []  # runs the harness itself could not complete: no verdict
    with broken_build(args.break_):
        for scenario in chosen:
            for number in range(1, args.runs + 1):
                seed = seeds.randrange(2**32)
                print(f"-- {scenario.name} run {number}/{args.runs} (seed {seed}): "
                      f"{scenario.title}", flush=True)
                try:
                    outcome = await run_once(scenario, settings, number, seed)
                except Exception:  # the harness failed (not the proxy): say so, go on
                    traceback.print_exc()
                    broken.append(f"HARNESS ERROR {scenario.name} run {number} (seed {seed}):"
                                  " no verdict, see the traceback above")
                    continue
                outcomes.append(outcome)
                print(report(outcome, args.verbose), flush=True)
    print("\n" + "\n".join(table(outcomes)))
    if args.write_docs:
        setup = (f"Load: {args.rate:g} new events/s for {args.seconds:g} s per run, "
                 f"{args.duplicate_share:.0%} of them delivered twice at once; give-up "
                 f"{args.give_up:g} s.")
        if args.break_:
            setup += f" **Broken build: `--break {args.break_}`.**"
        write_docs(results_markdown(outcomes, setup))
        print(f"results written to {DOCS}")
    verdict, passed = summary(outcomes)
    print(verdict, file=sys.stdout if passed else sys.stderr)
    for line in broken:
        print(line, file=sys.stderr)
    return 0 if passed and not broken else 1


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        code = asyncio.run(main_async(args))
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("interrupted; clusters and processes were stopped", file=sys.stderr)
        code = 130
    raise SystemExit(code)


if __name__ == "__main__":
    main()
