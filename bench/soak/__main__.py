"""``python -m bench.soak``: the command line (the package's docstring says what it does)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import os
import platform
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from bench import soak
from bench.soak.load import Sender
from bench.soak.locks import lock_waits
from bench.soak.report import Day, goals, table
from bench.soak.stores import Sample, SoakStore
from bench.wrk.deliveries import PATH, SECRET
from bench.wrk.procs import BenchError, Proc, Procs, cpu_us, wait_listening
from bench.wrk.stores import migrate

STORES = ("partitioned", "unpartitioned")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.soak",
                                     description=(soak.__doc__ or "").split("\n\n")[0])
    parser.add_argument("--day-seconds", type=float, default=240.0,
                        help="wall seconds of one simulated day")
    parser.add_argument("--days", type=int, default=6, help="simulated days")
    parser.add_argument("--events-per-day", type=int, default=12_000,
                        help="deliveries a simulated day, copies included, to each store")
    parser.add_argument("--duplicate-share", type=float, default=0.1,
                        help="share of deliveries that repeat an earlier event")
    parser.add_argument("--retention-days", type=float, default=3.0)
    parser.add_argument("--partition-days", type=float, default=1.0,
                        help="store.partitioning.interval, in simulated days")
    parser.add_argument("--stores", default=",".join(STORES),
                        help=f"comma-separated, of: {', '.join(STORES)}")
    parser.add_argument("--in-flight", type=int, default=256,
                        help="most deliveries in flight to each store")
    parser.add_argument("--give-up", type=float, default=30.0,
                        help="a delivery is redelivered until 2xx or this many seconds")
    parser.add_argument("--seed", type=int, help="the pattern's seed (default: random)")
    parser.add_argument("--keep", metavar="DIR", type=Path,
                        help="copy the proxies' and clusters' logs here before cleaning up")
    args = parser.parse_args(argv)
    args.stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    if not args.stores or set(args.stores) - set(STORES):
        parser.error(f"--stores takes {', '.join(STORES)}")
    if not 1 <= args.day_seconds <= 3600 or not 1 <= args.days <= 30:
        parser.error("--day-seconds must be 1–3600 and --days 1–30 (the run is bounded)")
    if not 0 <= args.duplicate_share < 1 or args.events_per_day < 1:
        parser.error("--duplicate-share must be in [0, 1) and --events-per-day ≥ 1")
    return args


def duration(seconds: float) -> str:
    return f"{max(1, round(seconds * 1000))}ms"


def proxy_config(args: argparse.Namespace, store: str, dsn: str, app_url: str) -> dict[str, Any]:
    """Retention, the partition interval and the maintenance interval scaled to the simulated
    day; maintenance every simulated minute (the default's real one) but at least every
    second, so that its own statements do not swamp the cost per event of a compressed day
    (retention deletes until done on each run, so it keeps up either way); no answer cache, so
    every copy is judged by the store."""
    day = args.day_seconds
    store_config: dict[str, Any] = {"url": dsn, "pool_max_size": 10}
    if store == "partitioned":
        store_config["partitioning"] = {"interval": duration(args.partition_days * day)}
    return {
        "listen": "127.0.0.1:0", "admin_listen": "127.0.0.1:0", "shutdown_timeout": "2s",
        "upstream": {"url": app_url, "timeout": "2s"},
        "store": store_config,
        "log": {"level": "info", "format": "json"},
        "answer_cache": 0,
        "maintenance": {"interval": duration(max(1.0, day * 60 / 86400))},
        "providers": {"github": {
            "path": PATH, "preset": "github", "secrets": [SECRET],
            "lease": "4s", "inflight_wait": "1s",
            "retention": duration(args.retention_days * day)}},
    }


@dataclass
class Deployed:
    """One store's cluster, app and proxy."""

    name: str
    store: SoakStore
    app: Proc | None = None
    app_log: Path | None = None
    proxy: Proc | None = None
    url: str = ""
    samples: list[Sample] = field(default_factory=list)
    proxy_cpu: list[float] = field(default_factory=list)
    log_offsets: list[int] = field(default_factory=list)


async def deploy(args: argparse.Namespace, procs: Procs, tmp: Path, name: str) -> Deployed:
    one = Deployed(name, SoakStore(name, tmp, args.day_seconds))
    await one.store.open()
    one.app_log = tmp / f"{name}-receipts.log"
    one.app = await procs.start(f"app-{name}", [sys.executable, "-m", "bench.app_fast",
                                                "--log", str(one.app_log)],
                                tmp / f"app-{name}.log")
    app_url = "http://" + await wait_listening(one.app)
    config = tmp / f"{name}.yaml"
    config.write_text(yaml.safe_dump(proxy_config(args, name, one.store.dsn, app_url)))
    try:
        await migrate(config)
    except BenchError as exc:
        if name == "partitioned" and "partitioning" in str(exc):
            raise BenchError("this build has no store.partitioning: run with "
                             "--stores unpartitioned") from None
        raise
    one.proxy = await procs.start(f"sidecar-{name}",
                                  [sys.executable, "-m", "sidecar", "run", "--config",
                                   str(config)], tmp / f"sidecar-{name}.log",
                                  env={"PYTHONUNBUFFERED": "1"})
    one.url = "http://" + await wait_listening(one.proxy)
    return one


async def sample_all(stores: Sequence[Deployed]) -> None:
    for one in stores:
        assert one.proxy is not None
        one.samples.append(await one.store.sample())
        one.proxy_cpu.append(cpu_us(one.proxy.pid))
        one.log_offsets.append(one.store.log_offset())


async def at_boundaries(stores: Sequence[Deployed], sender: Sender, days: int) -> None:
    """A sample of every store at the start of each simulated day (the end of the last is
    taken once the deliveries are drained)."""
    for day in range(1, days):
        await asyncio.sleep(max(0.0, day * sender.day_seconds - sender.clock()))
        await sample_all(stores)


def receipts_of(path: Path | None) -> Counter[str]:
    if path is None or not path.exists():
        return Counter()
    return Counter(line for line in path.read_text().splitlines() if line)


def load_average() -> str:
    return " ".join(f"{v:.1f}" for v in os.getloadavg())


async def run(args: argparse.Namespace) -> int:
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    rate = args.events_per_day / args.day_seconds
    print(f"soak: {args.days} days of {args.day_seconds:g}s, {args.events_per_day:,} "
          f"deliveries a day ({rate:,.1f}/s to each of {', '.join(args.stores)}), "
          f"seed {seed}, load average {load_average()}", file=sys.stderr, flush=True)
    procs = Procs()
    stores: list[Deployed] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sidecar-soak-") as name:
        tmp = Path(name)
        print(f"soak: working in {tmp}", file=sys.stderr, flush=True)
        os.chmod(tmp, 0o755)  # the clusters run as postgres when this runs as root
        try:
            for store in args.stores:
                stores.append(await deploy(args, procs, tmp, store))
            sender = Sender([s.url for s in stores], args.day_seconds, random.Random(seed),
                            args.duplicate_share, args.give_up)
            timeout = aiohttp.ClientTimeout(total=args.give_up)
            connector = aiohttp.TCPConnector(limit=0)
            async with aiohttp.ClientSession(timeout=timeout, connector=connector) as client:
                await sample_all(stores)
                sender.t0 = time.monotonic()
                sampler = asyncio.create_task(at_boundaries(stores, sender, args.days))
                try:
                    await sender.run(client, rate, args.days * args.day_seconds,
                                     args.in_flight)
                    await sampler
                    await sender.drain()
                finally:
                    sampler.cancel()
                    await sender.cancel()
                await sample_all(stores)
            ended = sender.clock()
            for one in stores:
                if one.app is not None:
                    await procs.stop(one.app)  # its receipts are then complete
            return report(args, seed, stores, sender, ended, time.monotonic() - started)
        finally:
            await procs.stop_all()
            if args.keep is not None:
                keep(args.keep, tmp, stores)
            for one in stores:
                await one.store.close()


def keep(dest: Path, tmp: Path, stores: Sequence[Deployed]) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for path in tmp.glob("*.log"):
        (dest / path.name).write_bytes(path.read_bytes())
    for one in stores:
        with contextlib.suppress(OSError):
            (dest / f"{one.name}-server.log").write_bytes(one.store.cluster.log_file.read_bytes())


def report(args: argparse.Namespace, seed: int, stores: Sequence[Deployed], sender: Sender,
           ended: float, wall: float) -> int:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(f"\n### Soak: {args.days} × {args.day_seconds:g}s days, {args.events_per_day:,} "
          f"deliveries a day, {args.duplicate_share:.0%} copies (seed {seed})\n")
    print(f"{now}; {platform.machine()}, {os.cpu_count()} CPUs; load average at the end "
          f"{load_average()}; wall {wall:,.0f}s; sender at most {sender.lag:.2f}s behind; "
          f"copies sent: {dict(sender.copies)}\n")
    all_goals = []
    for index, one in enumerate(stores):
        tally = sender.tallies[index]
        days: list[Day] = []
        text = one.store.log_since(one.log_offsets[0])
        base = one.log_offsets[0]
        for d in range(args.days):
            start, end = one.samples[d], one.samples[d + 1]
            seconds = (min(ended, (d + 1) * args.day_seconds) - d * args.day_seconds
                       if d == args.days - 1 else args.day_seconds)
            chunk = text[one.log_offsets[d] - base:one.log_offsets[d + 1] - base]
            days.append(Day(d, start, end, seconds, tally.answered.get(d, 0),
                            tally.failed.get(d, 0), tally.latencies.get(d, []),
                            one.proxy_cpu[d + 1] - one.proxy_cpu[d], lock_waits(chunk)))
        print(table(one.name, days))
        if tally.statuses:
            print(f"\nnon-2xx answers and errors (each redelivered): {tally.statuses}")
        print()
        all_goals += goals(one.name, days, args.retention_days, args.partition_days,
                           args.events_per_day, tally.acked, receipts_of(one.app_log),
                           sum(tally.failed.values()))
    print("Goals:\n" + "\n".join(g.line() for g in all_goals))
    return 0 if all(g.passed for g in all_goals) else 1


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)

    async def main_async() -> int:
        task = asyncio.current_task()
        assert task is not None
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        return await run(args)

    try:
        return asyncio.run(main_async())
    except BenchError as exc:
        print(f"bench.soak: {exc}", file=sys.stderr)
        return exc.code
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("bench.soak: interrupted; everything it started is stopped", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
