"""What a new event costs the SQLite store, without HTTP: ``--flows`` concurrent deliveries,
each claiming a new event then writing its result (``claim`` then ``complete``, as the proxy
does), for ``--events`` events. Counted, not only timed, because the machine may be shared:

- commits per event (SQLite's statement trace on the store's connection: each COMMIT is a
  WAL fsync with ``synchronous = FULL``);
- hand-offs to the worker thread per event (calls of ``SQLiteStore._call``);
- process CPU per event (both threads), and events per second (load-dependent).

    .venv/bin/python -m bench.sqlite_writes [--flows 1,8,32] [--events 3000] [--runs 3]

The sidecar measured is the one ``import sidecar`` finds: run it from another tree with
``PYTHONPATH=that/tree python -m bench.sqlite_writes`` to compare two versions side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import sidecar
from sidecar.core.events import AttemptResult, EventState, Outcome, RecordedResponse
from sidecar.store.sqlite import SQLiteStore

BODY = b"\x01" * 32
DONE = AttemptResult(EventState.DONE, Outcome.RESPONSE,
                     RecordedResponse(200, (("Content-Type", "text/plain"),), b"ok"), 1.0)


class _Commits:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self, sql: str) -> None:
        if sql.strip().upper() == "COMMIT":
            self.count += 1


async def one_run(path: Path, flows: int, events: int) -> dict[str, float]:
    store = await SQLiteStore.open(path)
    try:
        commits = _Commits()
        await store._call("trace", store._con.set_trace_callback, commits)
        hops = 0
        real_call = store._call

        async def counted(what: str, fn: Any, *args: Any) -> Any:
            nonlocal hops
            hops += 1
            return await real_call(what, fn, *args)

        store._call = counted  # type: ignore[method-assign]
        ids = iter(range(events))

        async def flow() -> None:
            for n in ids:
                claim = await store.claim("github", f"evt_{n}", BODY, 30.0, "bench")
                assert claim.won
                assert await store.complete("github", f"evt_{n}", 1, DONE)

        cpu, wall = time.process_time(), time.perf_counter()
        await asyncio.gather(*(flow() for _ in range(flows)))
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        store._call = real_call  # type: ignore[method-assign]
        await store._call("trace", store._con.set_trace_callback, None)
    finally:
        await store.close()
    return {"events/s": events / wall, "commits/event": commits.count / events,
            "hops/event": hops / events, "CPU µs/event": cpu / events * 1e6}


async def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.sqlite_writes")
    parser.add_argument("--flows", default="1,8,32", help="concurrent deliveries, comma-separated")
    parser.add_argument("--events", type=int, default=3000, help="new events per run")
    parser.add_argument("--runs", type=int, default=3, help="runs per setting (medians)")
    args = parser.parse_args()
    print(f"sidecar from {Path(sidecar.__file__).parent.parent}; {args.events} events, "
          f"medians of {args.runs}", file=sys.stderr)
    print("| flows | events/s | commits/event | hops/event | CPU µs/event |")
    print("|---:|---:|---:|---:|---:|")
    for flows in (int(f) for f in args.flows.split(",")):
        results = []
        for run in range(args.runs):
            with tempfile.TemporaryDirectory() as tmp:
                results.append(await one_run(Path(tmp) / f"bench{run}.db", flows, args.events))
        med = {k: statistics.median(r[k] for r in results) for k in results[0]}
        print(f"| {flows} | {med['events/s']:,.0f} | {med['commits/event']:.2f} | "
              f"{med['hops/event']:.2f} | {med['CPU µs/event']:,.0f} |", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
