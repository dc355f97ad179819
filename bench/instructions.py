"""Instructions per known duplicate: what the proxy's own process executes to answer a duplicate
of an event it forwarded itself, counted by valgrind's callgrind, so the figure does not move
with the machine's load (CPU µs per request does, a lot, on a shared box).

    .venv/bin/python -m bench.instructions [--tree DIR …] [--loop asyncio,uvloop]
                                           [--requests 2000] [--runs 3]

For each run, each ``--tree`` (default: this checkout; give a worktree of ``main`` to compare
before and after in one run) and each ``--loop``: webhook-sidecar (GitHub preset, log level
info, a fresh SQLite store: a known duplicate asks no store) starts under
``valgrind --tool=callgrind --instr-atstart=no``; ``--ids`` events are delivered once (forwarded
to the app: nginx, else bench/app_fast.py) and once more (warm-up), then instrumentation is
switched on (``callgrind_control -i on``) for ``--requests`` duplicates sent over
``--connections`` keep-alive connections, and off again. Prints instructions (Ir) per request,
per target and as medians over runs. Each valgrind'ed proxy also reports CPU µs per request
from /proc, meaningless in absolute terms (valgrind's) and shown only as a sanity check.

Counts user-space instructions only: system calls' kernel time is not in it, so a lever that
saves a write() or an epoll turn shows less here than in CPU time. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

from bench.wrk.app import App
from bench.wrk.deliveries import PATH, SECRET, body_of, headers_of, new_ids, prime
from bench.wrk.procs import REPO, BenchError, Procs, cpu_us, wait_listening

# `python -m sidecar` on uvloop's loop (as bench.wrk's --sidecar-loop uvloop does).
UVLOOP = ("import asyncio, sys, uvloop; "
          "asyncio.set_event_loop_policy(uvloop.EventLoopPolicy()); "
          "from sidecar.cli import main; raise SystemExit(main(sys.argv[1:]))")


def config(tmp: Path, name: str, app_url: str) -> Path:
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "listen": "127.0.0.1:0", "admin_listen": "127.0.0.1:0", "shutdown_timeout": "2s",
        "upstream": {"url": app_url, "timeout": "5s"},
        "store": {"url": f"sqlite:///{tmp / name}.db"},
        "log": {"level": "info", "format": "json"},
        "maintenance": {"interval": "1h"},
        "providers": {"github": {"path": PATH, "preset": "github", "secrets": [SECRET]}},
    }))
    return path


def request_of(delivery_id: str, host: str) -> bytes:
    body = body_of(delivery_id)
    head = "".join(f"{k}: {v}\r\n" for k, v in headers_of(delivery_id, body).items())
    return (f"POST {PATH} HTTP/1.1\r\nHost: {host}\r\n{head}"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


async def send_all(url: str, ids: list[str], requests: int, connections: int) -> None:
    """``requests`` duplicates, round robin over ``ids``, on ``connections`` keep-alive
    connections, one request in flight on each; every answer must be a 200 replay."""
    host = url.removeprefix("http://")
    address, port = host.rsplit(":", 1)
    wire = [request_of(i, host) for i in ids]
    counter = iter(range(requests))

    async def one_connection() -> None:
        reader, writer = await asyncio.open_connection(address, int(port))
        try:
            for n in counter:
                writer.write(wire[n % len(wire)])
                head = await reader.readuntil(b"\r\n\r\n")
                if not head.startswith(b"HTTP/1.1 200 ") or b"x-webhook-sidecar-replay: true" \
                        not in head.lower():
                    raise BenchError(f"not a replay: {head[:200]!r}")
                length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
                await reader.readexactly(int(length.group(1)) if length else 0)
        finally:
            writer.close()

    await asyncio.gather(*(one_connection() for _ in range(connections)))


async def control(*args: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        "callgrind_control", *args, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE)
    _, err = await proc.communicate()
    if proc.returncode:
        raise BenchError(f"callgrind_control {' '.join(args)}: {err.decode()}")


async def measure(procs: Procs, tmp: Path, app: App, tree: Path, loop: str, name: str,
                  args: argparse.Namespace) -> tuple[float, float]:
    """(instructions per request, CPU µs per request under valgrind) for one proxy."""
    out = tmp / f"{name}.callgrind"
    launch = ["-c", UVLOOP] if loop == "uvloop" else ["-m", "sidecar"]
    proc = await procs.start(
        name, ["valgrind", "--tool=callgrind", "--instr-atstart=no",
               f"--callgrind-out-file={out}", sys.executable, *launch,
               "run", "--config", str(config(tmp, name, app.url))],
        tmp / f"{name}.log", env={"PYTHONPATH": str(tree), "PYTHONUNBUFFERED": "1"}, cwd=tree)
    try:
        url = "http://" + await wait_listening(proc, timeout=300)
        ids = new_ids(args.ids)
        await prime(url, ids, concurrency=args.connections)
        await send_all(url, ids, args.ids, args.connections)  # every id answered from memory
        await control("-i", "on", str(proc.proc.pid))
        before = cpu_us(proc.proc.pid)
        await send_all(url, ids, args.requests, args.connections)
        spent = cpu_us(proc.proc.pid) - before
        await control("-i", "off", str(proc.proc.pid))
    finally:
        await procs.stop(proc, timeout=120)
    text = out.read_text(errors="replace")
    total = re.search(r"^totals: *(\d+)", text, re.M)
    if total is None:
        raise BenchError(f"no totals in {out}")
    return int(total.group(1)) / args.requests, spent / args.requests


async def main_async(args: argparse.Namespace) -> None:
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise BenchError("valgrind is not installed: apt-get install valgrind", 2)
    trees = args.trees
    loops = args.loop.split(",")
    procs = Procs()
    results: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-instr-") as tmp_name:
        tmp = Path(tmp_name)
        app = App(procs, tmp, "auto")
        try:
            await app.start()
            for run in range(1, args.runs + 1):
                for t, tree in enumerate(trees):
                    for loop in loops:
                        label = f"{tree} on {loop}"
                        got = await measure(procs, tmp, app, tree, loop,
                                            f"sidecar-{run}-{t}-{loop}", args)
                        print(f"run {run}: {label}: {got[0]:,.0f} Ir/req "
                              f"({got[1]:,.0f} µs/req under valgrind)", flush=True)
                        results.setdefault(label, []).append(got)
        finally:
            await procs.stop_all()
    print(f"\nmedians of {args.runs}, {args.requests} known duplicates over "
          f"{args.connections} connections, app: {app.kind}:")
    for label, values in results.items():
        print(f"  {label}: {statistics.median(v[0] for v in values):,.0f} Ir/req")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", default=[],
                        help="a source tree to run the proxy from (repeat to compare)")
    parser.add_argument("--loop", default="asyncio", help="asyncio, uvloop or both: a,b")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--ids", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    args.trees = [Path(tree).resolve() for tree in args.tree] or [REPO]
    try:
        asyncio.run(main_async(args))
    except BenchError as exc:
        print(f"bench.instructions: {exc}", file=sys.stderr)
        raise SystemExit(getattr(exc, "code", 1)) from None


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
