"""One run of a scenario: a private database server (PostgreSQL or MariaDB), the app, two
replicas and the provider; the load and the fault; quiescence; and the history handed to the
checker."""

from __future__ import annotations

import asyncio
import contextlib
import random
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp

from bench.chaos.app import RecordingApp
from bench.chaos.database import NOW, Database, Session
from bench.chaos.fanout import fan_out_note, for_destination
from bench.chaos.history import History, Kill, Kind, Receipt, Row
from bench.chaos.invariants import check
from bench.chaos.logs import from_logs
from bench.chaos.provider import Make, Provider, normal
from bench.chaos.report import Outcome, tally
from bench.chaos.settings import Settings, answer_bound, proxy_config
from bench.faultproxy import Fault, FaultProxy
from sidecar.config.loader import parse_config
from sidecar.config.model import Config
from tests.support import REPO, ProxyProcess, write_config

if TYPE_CHECKING:
    from bench.chaos.scenarios import Scenario


@dataclass
class Run:
    """Everything one scenario run owns; torn down by :func:`deployed`."""

    scenario: Scenario
    settings: Settings
    rng: random.Random
    t0: float = field(default_factory=time.monotonic)
    db: Database | None = None
    dsn: str = ""
    app: RecordingApp | None = None  # fan-out: the first destination's
    apps: dict[str, RecordingApp] = field(default_factory=dict)  # fan-out: each destination's
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

    def in_flight(self) -> int:
        """Requests at the app (every destination's) not answered yet."""
        return sum(app.in_flight() for app in self.apps.values() or
                   ([self.app] if self.app is not None else []))

    async def connect(self, name: str) -> Session:
        assert self.db is not None
        return await self.db.session(name)


@contextlib.asynccontextmanager
async def deployed(run: Run, tmp: Path) -> Any:
    """A private database server, the app (behind the fault proxy if the scenario has one)
    and two replicas; all stopped on the way out, whatever happened."""
    scenario = run.scenario
    db = run.db = Database(run.settings.store, Path(tmp), fsync=scenario.fsync)
    try:
        run.dsn = await db.start()
        run.apps = {name: RecordingApp(run.clock, scenario.app_delay, close=False,
                                       destination=name) for name in scenario.destinations}
        app = run.app = (next(iter(run.apps.values()), None)
                         or RecordingApp(run.clock, scenario.app_delay,
                                         close=scenario.fault_proxy is not None))
        if not scenario.app_down:
            for each in run.apps.values() or [app]:
                await each.start()
        upstream = app.url
        if scenario.fault_proxy is not None:
            choose = scenario.fault_proxy(run)
            run.fault_proxy = await FaultProxy(app.port, choose).start()
            upstream = run.fault_proxy.url
        config = proxy_config(upstream, run.dsn, queue=scenario.queue,
                              result_commit=run.settings.result_commit,
                              delivery=scenario.delivery,
                              destinations={name: a.url for name, a in run.apps.items()})
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
        for each in run.apps.values() or ([run.app] if run.app is not None else []):
            await each.stop()
        await db.cleanup()


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
    run.faults["app requests in flight at the kills"] += run.in_flight()
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
    now = NOW[run.settings.store]
    conn = await run.connect("chaos-checker")
    try:
        for _ in range(int((lease + run.settings.give_up) / 0.25) if run.scenario.queue
                       else 0):
            waiting = await conn.value("SELECT count(*) FROM webhook_event "
                                       "WHERE state IN ('queued', 'processing')")
            if not waiting:
                break
            await asyncio.sleep(0.25)
        for _ in range(int((lease + 2) / 0.25)):
            live = await conn.value("SELECT count(*) FROM webhook_event WHERE state = "
                                    f"'processing' AND lease_until > {now}")
            if not live:
                break
            await asyncio.sleep(0.25)
        records = await conn.fetch(
            "SELECT event_id, state, attempt, "
            f"coalesce(lease_until <= {now}, true) AS expired, provider FROM webhook_event")
    finally:
        await conn.close()
    return [Row(_text(event_id), state, attempt, bool(expired), _text(provider))
            for event_id, state, attempt, expired, provider in records]


def _text(key: str | bytes) -> str:
    """MariaDB's keys are VARBINARY (bytes); its booleans 0 and 1."""
    return key.decode() if isinstance(key, bytes) else key


async def run_once(scenario: Scenario, settings: Settings, number: int,
                   seed: int) -> list[Outcome]:
    """One run's outcome; a fan-out run's, one per destination (its history's part)."""
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
    receipts = [r for app in run.apps.values() or [run.app] for r in app.receipts]
    history = History(kinds=run.provider.kinds, deliveries=run.provider.deliveries,
                      receipts=receipts, forwards=forwards, rows=rows, bound=bound,
                      faults=dict(run.faults), expect_fault=scenario.expect_fault,
                      proxy_errors=errors, replica_deaths=deaths, kills=run.kills,
                      queued=scenario.queue,
                      concurrency=(scenario.delivery or {}).get("concurrency"),
                      lease=max(p.lease for p in run.config.providers))
    parts = [(f"{scenario.name}/{name}", for_destination(history, name))
             for name in scenario.destinations] or [(scenario.name, history)]
    if scenario.destinations:
        notes.append(fan_out_note(history))
    seconds = time.monotonic() - started
    outcomes = []
    for label, part in parts:
        if scenario.queue:
            notes.append(first_attempts(part))
        outcomes.append(Outcome(label, number, seconds, part, check(part), tally(part), notes,
                                server=run.db.description if run.db is not None else ""))
        notes = []  # the run's own notes go with its first part
    return outcomes


def first_attempts(h: History) -> str:
    """The attempt number of each event's first request at the app, counted."""
    first: dict[str, Receipt] = {}
    for receipt in sorted(h.receipts, key=lambda r: r.arrived):
        first.setdefault(receipt.event_id, receipt)
    numbers = Counter(r.attempt for r in first.values())
    return ("attempt number of each event's first request at the app: "
            + ", ".join(f"{n}: {count}" for n, count in sorted(numbers.items()))
            + " (above 1: a killed worker had taken it)")
