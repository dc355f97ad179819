"""What tracing costs the proxy: CPU seconds of the proxy process per new event, with tracing
off, with every delivery sampled and exported over OTLP/HTTP to a local receiver that discards,
and (``--main PATH``) on another checkout with tracing off. Rounds alternate the variants;
medians are reported. ``--before PATH``: another checkout with every delivery sampled too (a
change to tracing, measured against what it replaces in the same run). SQLite store, loopback
only, bounded by rounds x variants x events. ``--callgrind``: instructions the proxy ran per
new event instead (all its threads, under valgrind's callgrind: about 50 times slower, but the
same count however loaded the machine is; 400 events are plenty).

    .venv/bin/python -m bench.tracing_cost [--events 2000] [--rounds 3] [--main /work/main]
        [--before PATH] [--callgrind]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import aiohttp
import yaml
from aiohttp import web

from bench.common import signer
from bench.throughput import CONCURRENCY, config, run_load
from tests import support
from tests.support import ProxyProcess, StubApp

HERE = Path(__file__).resolve().parent.parent
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


async def discarding_receiver() -> tuple[web.AppRunner, int, list[int]]:
    """An OTLP/HTTP receiver that reads each export and throws it away; counts the bytes."""
    received: list[int] = []

    async def traces(request: web.Request) -> web.Response:
        received.append(len(await request.read()))
        return web.Response(content_type="application/x-protobuf")

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/traces", traces)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, runner.addresses[0][1], received


def instructions(pid: int, out: Path) -> int:
    """Instructions callgrind counted in the proxy since its last dump; dumps (and zeroes)."""
    subprocess.run(["callgrind_control", "--dump", str(pid)], check=True, capture_output=True)
    dumps = sorted(out.parent.glob(f"{out.name}.{pid}.*"), key=lambda p: int(p.suffix[1:]))
    summary = next(line for line in dumps[-1].read_text().splitlines()
                   if line.startswith("summary:"))
    return int(summary.split()[1])


async def one(tree: Path, env: dict[str, str], events: int, tmp: Path,
              callgrind: bool = False) -> float:
    """CPU ms (``callgrind``: instructions) of the proxy per new event, over ``events`` new
    events after a warm-up."""
    stub = await StubApp().start()
    store = f"sqlite:///{tmp / f'{secrets.token_hex(4)}.db'}"
    path = tmp / "bench.yaml"
    path.write_text(yaml.safe_dump(config(stub.url, store)))
    # `python -m sidecar` runs the checkout it is started in (its folder is first on the path).
    support.REPO = tree
    proxy = ProxyProcess(path, env={"PYTHONPATH": str(tree), **env})
    out = tmp / "callgrind.out"
    python = sys.executable
    if callgrind:  # ProxyProcess starts sys.executable: a script running it under callgrind
        wrapper = tmp / "callgrind-python"
        wrapper.write_text(f'#!/bin/sh\nexec valgrind --tool=callgrind -q '
                           f'--callgrind-out-file={out}.%p {python} "$@"\n')
        wrapper.chmod(0o755)
        sys.executable = str(wrapper)
    try:
        started = await proxy.start(timeout=600 if callgrind else 20)
    finally:
        sys.executable = python
    headers = signer(config("http://x", store))
    url = started.url + "/webhooks/stripe"
    run = secrets.token_hex(3)
    try:
        async with aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=CONCURRENCY)) as client:
            warm = [json.dumps({"id": f"warm_{run}_{i}"}).encode() for i in range(300)]
            await run_load(client, url, warm, headers, CONCURRENCY)
            assert started.proc is not None
            pid = started.proc.pid
            before = instructions(pid, out) if callgrind else cpu_seconds(pid)
            bodies = [json.dumps({"id": f"evt_{run}_{i}"}).encode() for i in range(events)]
            _, _, statuses = await run_load(client, url, bodies, headers, CONCURRENCY)
            after = instructions(pid, out) if callgrind else cpu_seconds(pid)
            assert statuses == {200: events}, statuses
    finally:
        await started.terminate()
        await stub.stop()
    if callgrind:
        return after / events  # the dump before zeroed the count
    return (after - before) * 1000 / events


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--main", type=Path, help="another checkout, run with tracing off")
    parser.add_argument("--before", type=Path,
                        help="another checkout, run with every delivery sampled")
    parser.add_argument("--callgrind", action="store_true",
                        help="count instructions under callgrind instead of CPU time")
    args = parser.parse_args()
    runner, port, received = await discarding_receiver()
    traced = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
              "OTEL_TRACES_SAMPLER": "always_on"}
    variants = {"tracing off": (HERE, {}), "tracing on, all sampled": (HERE, traced)}
    if args.before is not None:
        variants["before, all sampled"] = (args.before.resolve(), traced)
    if args.main is not None:
        variants["main (no tracing)"] = (args.main.resolve(), {})
    results: dict[str, list[float]] = {name: [] for name in variants}
    try:
        with tempfile.TemporaryDirectory() as tmp_dir:
            for round_ in range(args.rounds):
                order = list(variants)
                if round_ % 2:
                    order.reverse()
                for name in order:
                    tree, env = variants[name]
                    results[name].append(await one(tree, env, args.events, Path(tmp_dir),
                                                  args.callgrind))
    finally:
        await runner.cleanup()
    print(f"{os.cpu_count()} cores, Python {sys.version.split()[0]}; {args.events} new events "
          f"x {args.rounds} rounds, concurrency {CONCURRENCY}, SQLite; "
          f"{sum(received)} bytes of spans received")
    base = statistics.median(results["tracing off"])
    unit, scale = ("M instructions/event", 1e-6) if args.callgrind else ("CPU ms/event", 1.0)
    for name, values in results.items():
        median = statistics.median(values)
        print(f"{name:<26} {median * scale:6.3f} {unit}  ({median / base:5.2f}x)  "
              f"rounds: {', '.join(f'{v * scale:.3f}' for v in values)}")


if __name__ == "__main__":
    asyncio.run(main())
