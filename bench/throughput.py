"""Throughput and latency of the proxy on loopback: new events, duplicates of done events, and
bursts of concurrent copies of one event. Bounded in count and time; loopback only.

    .venv/bin/python -m bench.throughput [--store sqlite|postgres|both] [--events N]

The proxy runs as a real subprocess (`python -m sidecar run`); a trivial app and the load
driver run in this process. PostgreSQL: $SIDECAR_BENCH_PG_DSN, else the server at
127.0.0.1:5432 (a fresh database is created and dropped).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import yaml

from bench.common import signer, with_pg_database
from tests.support import ProxyProcess, StubApp

SECRET = "whsec_bench_0123456789abcdef"
CONCURRENCY = 32


def config(stub_url: str, store_url: str) -> dict[str, object]:
    return {
        "listen": "127.0.0.1:0", "admin_listen": "127.0.0.1:0",
        "upstream": {"url": stub_url, "timeout": "5s"},
        "store": {"url": store_url, "pool_max_size": 10},
        "log": {"level": "info", "format": "json"},  # one line per delivery, as in production
        "maintenance": {"interval": "1h"},
        "providers": {"stripe": {"path": "/webhooks/stripe", "preset": "stripe",
                                 "secrets": [SECRET]}},
    }


async def run_load(client: aiohttp.ClientSession, url: str, bodies: list[bytes],
                   headers: Callable[[bytes], dict[str, str]],
                   concurrency: int) -> tuple[float, list[float], dict[int, int]]:
    """Send every body once, ``concurrency`` at a time; returns wall time, latencies and
    the count of each status."""
    queue = list(reversed(bodies))
    latencies: list[float] = []
    statuses: dict[int, int] = {}

    async def worker() -> None:
        while queue:
            body = queue.pop()
            started = time.perf_counter()
            async with client.post(url, data=body, headers=headers(body)) as resp:
                await resp.read()
                statuses[resp.status] = statuses.get(resp.status, 0) + 1
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started, latencies, statuses


def summary(name: str, wall: float, latencies: list[float], statuses: dict[int, int]) -> dict:
    ordered = sorted(latencies)
    return {
        "scenario": name, "requests": len(latencies), "rps": round(len(latencies) / wall),
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p99_ms": round(ordered[int(len(ordered) * 0.99) - 1] * 1000, 2),
        "statuses": statuses,
    }


async def bench_store(kind: str, store_url: str, events: int, tmp: Path) -> list[dict]:
    stub = await StubApp().start()
    path = tmp / f"{kind}.yaml"
    path.write_text(yaml.safe_dump(config(stub.url, store_url)))
    if kind == "postgres":
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "sidecar", "migrate", "--config", str(path))
        assert await proc.wait() == 0
    proxy = await ProxyProcess(path).start()
    headers = signer(config("http://x", store_url))
    url = proxy.url + "/webhooks/stripe"
    run = secrets.token_hex(3)
    bodies = [json.dumps({"id": f"evt_{run}_{i}", "type": "bench"}).encode()
              for i in range(events)]
    results = []
    try:
        async with aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=CONCURRENCY)) as client:
            warm = [json.dumps({"id": f"warm_{run}_{i}"}).encode() for i in range(200)]
            await run_load(client, url, warm, headers, CONCURRENCY)
            results.append(summary("new events", *await run_load(
                client, url, bodies, headers, CONCURRENCY)))
            assert stub.count() == events + 200, "every new event reached the app once"
            results.append(summary("duplicates of done events", *await run_load(
                client, url, bodies, headers, CONCURRENCY)))
            assert stub.count() == events + 200, "no duplicate reached the app"
            bursts = [json.dumps({"id": f"burst_{run}_{i // 50}"}).encode()
                      for i in range(min(events, 2000))]
            results.append(summary("bursts of 50 copies", *await run_load(
                client, url, bursts, headers, CONCURRENCY)))
    finally:
        await proxy.terminate()
        await stub.stop()
    for result in results:
        result["store"] = kind
    return results


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--events", type=int, default=3000)
    args = parser.parse_args()
    results: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        if args.store in ("sqlite", "both"):
            results += await bench_store("sqlite", f"sqlite:///{tmp / 'bench.db'}",
                                         args.events, tmp)
        if args.store in ("postgres", "both"):
            results += await with_pg_database(
                lambda dsn: bench_store("postgres", dsn, args.events, tmp))
    print(f"machine: {platform.node()} {platform.machine()} {os.cpu_count()} cores, "
          f"Python {platform.python_version()}; concurrency {CONCURRENCY}")
    print(f"{'store':<9} {'scenario':<28} {'requests':>8} {'req/s':>7} {'p50 ms':>8} "
          f"{'p99 ms':>8}  statuses")
    for r in results:
        print(f"{r['store']:<9} {r['scenario']:<28} {r['requests']:>8} {r['rps']:>7} "
              f"{r['p50_ms']:>8} {r['p99_ms']:>8}  {r['statuses']}")


if __name__ == "__main__":
    asyncio.run(main())
