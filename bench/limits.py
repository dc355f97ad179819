"""Rate and concurrency limits held across processes, measured (docs/benchmarks.md, "Rate and
concurrency limits").

    .venv/bin/python -m bench.limits [--events 3000] [--rate 100] [--burst 20]
                                     [--concurrency 5] [--processes 3] [--app-ms 20]

A private PostgreSQL cluster (tests/pgserver.py), three proxy processes sharing one database,
one queue-mode provider with ``delivery: {rate, burst, concurrency}``. The backlog is made
first: every event is delivered (signed, concurrently) while the app is down, so each is
queued and none can be forwarded. Then the app comes up on loopback: it records when each
request arrived and how many were in its handler at once (each held ``--app-ms``, its own
work). Reported, and checked (exit 1 if any fails):

- the most arrivals in any 10 s window, against ``burst`` + ``rate`` * 10 (+10 %);
- the most requests in flight at once, against ``concurrency``;
- every event arrived exactly once (as attempt 1), none dead.

The burst is given (20) rather than left at its default (one second's worth, 100): a bucket
that starts full lets ``burst`` events go at once, so the bound on a 10 s window is
``burst`` + ``rate`` * 10, and a burst of 100 alone would take the 10 % margin.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from aiohttp import web

from bench.chaos.run import migrate, stop_replica
from tests.pgserver import ThrowawayCluster, create_database
from tests.support import (
    ProxyProcess,
    Rows,
    Seen,
    StubApp,
    base_config,
    post,
    stripe_event,
    stripe_headers,
    write_config,
)

WINDOW = 10.0
MARGIN = 0.10


class InFlight:
    """The app's handler: holds each request ``seconds`` (its own work) and counts how many
    are inside at once."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.now = 0
        self.most = 0

    async def __call__(self, seen: Seen) -> web.StreamResponse:
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            await asyncio.sleep(self.seconds)  # the app's work
        finally:
            self.now -= 1
        return web.json_response({"ok": True})


def most_in_window(times: list[float], window: float) -> int:
    """The most arrivals within any ``window`` seconds (a window starting at each arrival)."""
    ordered = sorted(times)
    most, first = 0, 0
    for last, at in enumerate(ordered):
        while ordered[first] <= at - window:
            first += 1
        most = max(most, last - first + 1)
    return most


@dataclass(frozen=True, slots=True)
class Options:
    events: int
    rate: int
    burst: int
    concurrency: int
    processes: int
    app_ms: float


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


async def measure(options: Options, tmp: Path) -> int:
    cluster = ThrowawayCluster(tmp / "pg")
    app = StubApp(listen_later=True)
    gauge = InFlight(options.app_ms / 1000)
    app.behaviour = gauge
    procs: list[ProxyProcess] = []
    try:
        await asyncio.to_thread(cluster.start)
        dsn = await create_database(cluster.dsn, "sidecar_limits")
        config = base_config(app.url, dsn)
        stripe = config["providers"]["stripe"]
        stripe.update({
            "mode": "queue", "lease": "10s",
            "queue": {"first_retry": "200ms", "max_retry_delay": "1s", "concurrency": 10,
                      "poll_interval": "250ms", "max_queue_depth": options.events * 2},
            "delivery": {"rate": f"{options.rate}/s", "burst": options.burst,
                         "concurrency": options.concurrency}})
        config["providers"] = {"stripe": stripe}
        config["store"].update({"pool_max_size": 10, "statement_timeout": "5s"})
        path = write_config(tmp, config)
        await migrate(path)
        procs = list(await asyncio.gather(*(ProxyProcess(path).start()
                                            for _ in range(options.processes))))
        ids = [f"evt_{n:05d}" for n in range(options.events)]
        bodies = [stripe_event(event_id) for event_id in ids]
        started = time.monotonic()
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=50)) as client:
            slots = asyncio.Semaphore(50)

            async def deliver(n: int) -> int:
                async with slots:
                    url = procs[n % len(procs)].url + "/webhooks/stripe"
                    status, _, _ = await post(client, url, bodies[n], stripe_headers(bodies[n]))
                    return status

            statuses = Counter(await asyncio.gather(*(deliver(n) for n in range(len(ids)))))
        print(f"backlog: {options.events} events accepted in {time.monotonic() - started:.1f} s "
              f"with the app down: {dict(statuses)}")
        if statuses != {200: options.events}:
            return 1
        await app.start()
        up = time.monotonic()
        rows = Rows(dsn)
        deadline = up + options.events / options.rate * 3 + 60
        while True:
            states = Counter(r["state"] for r in await rows.all())
            if states.get("done", 0) == options.events or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)  # polling the database, bounded by the deadline
        drained = time.monotonic() - up
        seen = Counter(s.event_id for s in app.seen)
        attempts = Counter(s.attempt for s in app.seen)
        arrivals = [s.at for s in app.seen]
        busiest = most_in_window(arrivals, WINDOW)
        bound = options.burst + options.rate * WINDOW
        span = max(arrivals) - min(arrivals) if arrivals else 0.0
        print(f"machine: {os.cpu_count()} CPUs ({cpu_model()}), load average "
              f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        print(f"{options.processes} processes, rate {options.rate}/s burst {options.burst}, "
              f"concurrency {options.concurrency}, app {options.app_ms:g} ms per request")
        print(f"drained in {drained:.1f} s; first to last arrival {span:.1f} s "
              f"({len(arrivals) / span if span else 0:.1f}/s)")
        print(f"most arrivals in any {WINDOW:g} s window: {busiest} (bound {bound:g}, "
              f"+{MARGIN:.0%}: {bound * (1 + MARGIN):g}; {busiest / WINDOW:.1f}/s)")
        print(f"most in flight at the app: {gauge.most} (limit {options.concurrency})")
        print(f"events: {len(seen)} of {options.events} arrived, each "
              f"{sorted(set(seen.values()))} time(s); attempts {dict(attempts)}; "
              f"rows {dict(states)}")
        checks = {
            "rate": busiest <= bound * (1 + MARGIN),
            "concurrency": gauge.most <= options.concurrency,
            "exactly once": sorted(seen) == ids and set(seen.values()) == {1},
            "all done": states.get("done", 0) == options.events,
        }
        for name, ok in checks.items():
            print(f"  {name}: {'ok' if ok else 'FAILED'}")
        return 0 if all(checks.values()) else 1
    finally:
        for proc in procs:
            await stop_replica(proc)
        await app.stop()
        await asyncio.to_thread(cluster.cleanup)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=3000)
    parser.add_argument("--rate", type=int, default=100)
    parser.add_argument("--burst", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=5)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--app-ms", type=float, default=20.0)
    args = parser.parse_args(argv)
    options = Options(args.events, args.rate, args.burst, args.concurrency, args.processes,
                      args.app_ms)
    with tempfile.TemporaryDirectory(prefix="sidecar-limits-") as tmp:
        return asyncio.run(measure(options, Path(tmp)))


if __name__ == "__main__":
    sys.exit(main())
