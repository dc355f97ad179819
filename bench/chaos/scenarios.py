"""The scenarios: each a fault injected into one run while the load goes on."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

import asyncmy
import asyncpg

from bench.chaos.database import Session
from bench.chaos.history import Kind
from bench.chaos.provider import fixed, gzip_bomb, gzipped
from bench.chaos.run import Run, kill_replica
from bench.chaos.settings import APPLICATION_NAME, DATABASE, proxy_config
from bench.common import signer
from bench.faultproxy import Fault

HANG_AT, HANG_FOR = 4.0, 15.0  # longer than the answer bound: a hung request shows
CRASH_AT, CRASH_DOWN = 6.0, 5.0


async def db_hang(run: Run) -> None:
    """SIGSTOP the server (the postmaster and every backend; mariadbd) for HANG_FOR seconds,
    then SIGCONT (also when the run is cancelled: ``paused`` continues them on the way out)."""
    assert run.db is not None
    await run.at(HANG_AT)
    processes = run.db.processes()
    with run.db.paused():
        run.faults["processes stopped"] = processes
        await asyncio.sleep(HANG_FOR)
    run.faults["seconds stopped"] = int(HANG_FOR)


# The proxies' sessions, never the harness's own: PostgreSQL's by database and application
# name; MariaDB keeps no application name, so by database, except this session (the only
# other session of the harness in this scenario).
SESSIONS = {
    "postgres": ("SELECT pid FROM pg_stat_activity WHERE datname = $1 "
                 "AND application_name LIKE $2 AND pid <> pg_backend_pid()",
                 (DATABASE, APPLICATION_NAME + "%")),
    "mariadb": ("SELECT id FROM information_schema.processlist WHERE db = %s "
                "AND id <> CONNECTION_ID()", (DATABASE,)),
}


async def backend_kills(run: Run) -> None:
    """One or two of the proxies' connections killed every 0.3 to 1 s: pg_terminate_backend
    (filtered by database and application name), or MariaDB's ``KILL CONNECTION``."""
    conn = await run.connect("chaos-killer")
    sessions, args = SESSIONS[conn.store]
    try:
        await run.at(3.0)
        while run.clock() < run.settings.seconds - 3:
            await asyncio.sleep(run.rng.uniform(0.3, 1.0))
            pids = [row[0] for row in await conn.fetch(sessions, *args)]
            for pid in run.rng.sample(pids, min(len(pids), run.rng.randint(1, 2))):
                if await kill_session(conn, int(pid)):
                    run.faults["backends terminated"] += 1
    finally:
        await conn.close()


async def kill_session(conn: Session, pid: int) -> bool:
    """Whether the session was there to kill."""
    if conn.store == "postgres":
        return bool(await conn.value("SELECT pg_terminate_backend($1)", pid))
    try:
        await conn.fetch(f"KILL CONNECTION {pid}")
    except asyncmy.errors.OperationalError as exc:
        if exc.args and exc.args[0] == UNKNOWN_THREAD:  # it ended meanwhile
            return False
        raise
    return True


UNKNOWN_THREAD = 1094  # MariaDB's ER_NO_SUCH_THREAD


async def db_crash(run: Run) -> None:
    """A crash (no checkpoint: ``pg_ctl stop -m immediate``, SIGKILL of mariadbd), down
    CRASH_DOWN seconds, then started again (crash recovery)."""
    db = run.db
    assert db is not None
    await run.at(CRASH_AT)
    try:
        await db.crash()
        run.faults["crashes"] += 1
        await asyncio.sleep(CRASH_DOWN)
    finally:
        await db.restart()
    run.faults["restarts"] += 1


# Up to 4 in-flight or failed rows not locked before, at random. MariaDB locks every row a
# locking read reads, not only those its LIMIT returns: so the rows are picked by a plain read
# first, then locked by primary key, skipping those already locked. The lock waits end after
# 500 ms (PostgreSQL) or 1 s (MariaDB counts whole seconds).
LOCK_PG = ("SELECT event_id FROM webhook_event WHERE provider = 'stripe' "
           "AND state IN ('processing', 'failed') AND event_id <> ALL($1::text[]) "
           "ORDER BY random() LIMIT 4 FOR UPDATE SKIP LOCKED")
PICK_MARIADB = ("SELECT event_id FROM webhook_event WHERE provider = 'stripe' "
                "AND state IN ('processing', 'failed') ORDER BY RAND() LIMIT 20")
LOCK_MARIADB = ("SELECT event_id FROM webhook_event WHERE provider = 'stripe' "
                "AND event_id IN ({}) AND state IN ('processing', 'failed') "
                "LIMIT 4 FOR UPDATE SKIP LOCKED")


async def lock_rows(conn: Session, locked: list[str]) -> list[str]:
    """Lock (in the caller's transaction) up to 4 rows not in ``locked``; their ids."""
    if conn.store == "postgres":
        await conn.fetch("SET LOCAL lock_timeout = '500ms'")
        return [row[0] for row in await conn.fetch(LOCK_PG, locked)]
    picked = [row[0] for row in await conn.fetch(PICK_MARIADB)
              if row[0].decode() not in locked]
    if not picked:
        return []
    rows = await conn.fetch(LOCK_MARIADB.format(", ".join(["%s"] * len(picked))), *picked)
    return [row[0].decode() for row in rows]


async def row_locks(run: Run) -> None:
    """Another session holds SELECT … FOR UPDATE on up to 4 in-flight or failed rows for
    ``lock_hold`` seconds, again and again; each row is locked once (a row whose result write
    is being retried stays in flight: locking it again would make one lock of any length)."""
    conn = await run.connect("chaos-locker")
    if conn.store == "mariadb":  # as the proxies: no gap locks, whole seconds of lock wait
        await conn.fetch("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        await conn.fetch("SET SESSION innodb_lock_wait_timeout = 1")
    locked: list[str] = []
    try:
        await run.at(3.0)
        hold = run.settings.lock_hold
        while run.clock() < run.settings.seconds - hold - 1:
            with contextlib.suppress(asyncpg.PostgresError, asyncmy.errors.Error):
                async with conn.transaction():
                    rows = await lock_rows(conn, locked)
                    locked += rows
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


BREAKER = {"failures": 5, "window": "10s", "cooldown": "1s"}
BROKEN = ((3.0, 7.0), (10.0, 14.0))  # seconds into the run while the app answers 500
KILL_IN_BROKEN = 5.0  # a replica SIGKILLed in the first broken spell (probes taken over)


async def breaker_cycles(run: Run) -> None:
    """Queue mode with a breaker (5 failures in 10 s, cooldown 1 s): the app answers 500 for two
    4-second spells, so the breaker opens, probes once a second (failing), and closes when the
    app recovers, twice; a replica is SIGKILLed and restarted in the first spell. Events go on
    being accepted and must all be delivered once the app works, none dead."""
    assert run.app is not None
    for number, (start, end) in enumerate(BROKEN):
        await run.at(start)
        run.app.failing = True
        if number == 0:
            await run.at(KILL_IN_BROKEN)
            await kill_replica(run, run.rng.randrange(len(run.replicas)))
        await run.at(end)
        run.app.failing = False
        run.faults["seconds the app answered 500"] += round(end - start)
    run.faults["breaker openings logged"] = sum(
        1 for replica in run.replicas for entry in replica.logs
        if entry.get("event") in ("provider_breaker_opened", "provider_breaker_reopened"))


PERMIT_KILLS = 3  # queue-kill-permits: at most this many replicas killed holding permits
PERMIT_KILLS_BY = 12.0  # … none after this time, so the last lease ends with a backlog left


async def queue_kill_permits(run: Run) -> None:
    """Queue mode with ``delivery.concurrency``: the app works 0.3 to 1 s per request, slower
    than the load, so a backlog builds and every permit is held; a replica is SIGKILLed (and
    restarted) while requests it forwards are at the app, every 1.5 to 3 s from 2 s until 12 s
    (two or three times), so the last lease ends with a backlog left. Its permits
    stay held until their lease ends; then the survivors must fill every slot again."""
    assert run.app is not None
    await run.at(2.0)
    for _ in range(PERMIT_KILLS):
        if run.clock() > PERMIT_KILLS_BY:
            break
        await asyncio.sleep(run.rng.uniform(1.5, 3.0))
        run.faults["permits held at the app at the kills"] += run.app.in_flight()
        await kill_replica(run, run.rng.randrange(len(run.replicas)))


DESTINATIONS = ("billing", "crm", "analytics")  # fanout-kill: the provider's three apps
DOWN = "crm"  # … the one that goes down
DOWN_SPELL = (5.0, 12.0)  # seconds into the run while it is down


async def fanout_kill(run: Run) -> None:
    """Queue mode with three destinations, each app working 0.3 to 1 s per request: crm dies
    at 5 s (the requests it is working on get no answer, then connections are refused) and
    comes back at 12 s, while a random replica is SIGKILLed (and restarted)
    every 1.5 to 3 s from 2 s until 3 s before the end, with forwards to every destination in
    flight (and, now and then, a fan-out: the note counts those taken again). Each
    destination must get every event, a repeat only as a higher attempt."""
    app = run.apps[DOWN]

    async def spell() -> None:
        await run.at(DOWN_SPELL[0])
        run.faults[f"{DOWN}: requests cut when it went down"] += app.in_flight()
        await app.go_down()
        try:
            await run.at(DOWN_SPELL[1])
        finally:
            await app.come_up()
        run.faults[f"{DOWN}: seconds down"] = round(DOWN_SPELL[1] - DOWN_SPELL[0])

    down = asyncio.create_task(spell())
    try:
        await queue_kill_forward(run)
        await down
    finally:
        down.cancel()
        await asyncio.gather(down, return_exceptions=True)


async def no_fault(run: Run) -> None:
    """A control run: the same load with nothing injected; every invariant must hold."""


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    title: str
    inject: Callable[[Run], Coroutine[Any, Any, None]]
    app_delay: tuple[float, float] = (0.0, 0.05)
    fsync: bool = False  # only a cluster that is crashed needs it (mariadbd: always on)
    fault_proxy: Callable[[Run], Callable[[], Fault]] | None = None
    expect_fault: bool = True
    queue: bool = False  # the provider in queue mode
    app_down: bool = False  # the app listens only when the scenario starts it
    delivery: Mapping[str, Any] | None = None  # the provider's delivery limits
    destinations: tuple[str, ...] = ()  # queue mode: fans out to an app of each name


# The app works longer where the fault must catch attempts in flight (claimed, forwarded, not
# yet recorded): at 10 events/s, 100-500 ms of work keeps about three in flight at any time.
IN_FLIGHT = (0.1, 0.5)

SCENARIOS = {s.name: s for s in (
    Scenario("db-hang", f"database hang: SIGSTOP postmaster + backends (mariadbd) "
             f"{HANG_FOR:g} s", db_hang, app_delay=IN_FLIGHT),
    Scenario("backend-kills", "pg_terminate_backend (KILL CONNECTION) on the proxies' "
             "connections at random", backend_kills, app_delay=IN_FLIGHT),
    Scenario("db-crash", f"pg_ctl stop -m immediate (SIGKILL mariadbd), restart after "
             f"{CRASH_DOWN:g} s", db_crash, app_delay=IN_FLIGHT, fsync=True),
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
    Scenario("breaker-cycles", "queue mode with a breaker: the app answers 500 for two 4 s "
             "spells (the breaker opens, probes, closes), a replica SIGKILLed in the first",
             breaker_cycles, queue=True, delivery={"breaker": BREAKER}),
    Scenario("queue-kill-permits", "queue mode, delivery.concurrency 3: SIGKILL a replica "
             "while its forwards hold permits, every 1.5–3 s until 12 s", queue_kill_permits,
             app_delay=(0.3, 1.0), queue=True, delivery={"concurrency": 3}),
    Scenario("fanout-kill", f"queue mode, 3 destinations: {DOWN} down "
             f"{DOWN_SPELL[0]:g}–{DOWN_SPELL[1]:g} s, a replica SIGKILLed every 1.5–3 s "
             "while forwards are in flight", fanout_kill, app_delay=(0.3, 1.0), queue=True,
             destinations=DESTINATIONS),
)}
CONTROL = Scenario("control", "no fault: the same load as a baseline", no_fault,
                   expect_fault=False)
