"""One phase: its ids, its server, a warm-up, the measured wrk run with the CPU it cost, and
the checks of what the app received."""

from __future__ import annotations

import asyncio
import math
import sys
import time
from collections import Counter
from pathlib import Path

from bench.wrk.context import Context
from bench.wrk.deliveries import new_ids, prime, write_deliveries
from bench.wrk.load import WrkResult, prime_with_wrk, run_wrk
from bench.wrk.mariadb import COUNTERS
from bench.wrk.phases import Phase, Result
from bench.wrk.procs import BenchError, cpu_us
from bench.wrk.pyspy import profile_summary, start_py_spy
from bench.wrk.report import median
from bench.wrk.servers import fresh_store, sidecar_config, start_server, start_sidecar
from bench.wrk.stores import cpu_delta

QUEUE_DRAIN = 300.0  # seconds a queue phase waits for the app to receive what was accepted


def ids_needed(ctx: Context, seconds: float, per: int = 1) -> int:
    """Ids for ``seconds`` at up to --max-rate requests/s (at least 10 000), ``per`` copies."""
    return max(10_000, math.ceil(float(ctx.args.max_rate) * seconds / per)) + 1000


async def run_phase(ctx: Context, phase: Phase) -> Result:
    args = ctx.args
    connections = args.burst if phase.workload == "burst" else args.connections
    per = args.burst if phase.workload == "burst" else 1
    mode = phase.workload
    if phase.workload == "dup" and phase.prime == "other":
        # Each request an id this process has never seen (it would remember one it answered):
        # a large set, each sent once ("new" mode, which reports running out).
        mode = "new"
        measured_ids = new_ids(args.unknown_ids)
        warm_ids = new_ids(max(1000, math.ceil(args.unknown_ids * args.warmup / args.duration)))
    elif phase.workload == "dup":
        measured_ids = warm_ids = new_ids(args.dup_ids)
    else:
        measured_ids = new_ids(ids_needed(ctx, args.duration, per))
        warm_ids = new_ids(ids_needed(ctx, args.warmup, per))
    measured = write_deliveries(ctx.path(f"{phase.name}.deliveries"), measured_ids)
    warm = (measured if warm_ids is measured_ids else
            write_deliveries(ctx.path(f"{phase.name}-warmup.deliveries"), warm_ids))
    store = ctx.store_of(phase) if phase.server == "sidecar" else ""
    pg = ctx.pg if store == "postgres" else None
    maria = ctx.maria if store == "mariadb" else None
    store_url = await fresh_store(ctx, store) if store else ""
    pause_ms = 0.0
    if phase.half_of:
        reached = median(r.rps for r in ctx.results.get(phase.half_of, []))
        if not reached:
            raise BenchError(f"{phase.name} needs the {phase.half_of} phase before it")
        # Closed-loop wrk: each connection answers then waits; at half load the answer time
        # is small beside the pause, so the rate is close to (and at most) half.
        pause_ms = connections * 1000.0 / (reached / 2)

    if phase.prime == "other":  # another proxy process delivers them first, then stops
        other, other_url = await start_sidecar(ctx, sidecar_config(ctx, store_url), "other",
                                               before=phase.before)
        both = write_deliveries(ctx.path(f"{phase.name}-prime.deliveries"),
                                measured_ids + warm_ids)
        await prime_with_wrk(ctx.app, other_url, both, measured_ids + warm_ids,
                             args.connections)
        await ctx.procs.stop(other)
    server, url = await start_server(ctx, phase, store_url)
    commits0, db0, counters0 = 0, {}, {}
    try:
        if phase.prime == "same":
            await prime(url, measured_ids)
        await run_wrk(url, warm, mode, args.warmup, connections, args.threads, args.burst)
        if pg is not None:
            await pg.checkpoint()
            await asyncio.sleep(args.settle)  # idle sessions flush their stats within 10 s
            commits0 = await pg.commits()
            db0 = await pg.cpu()
        elif maria is not None:
            counters0 = await maria.counters()
            db0 = await maria.cpu()
        elif phase.server == "competitor" and ctx.redis is not None:
            db0 = {ctx.redis.pid: cpu_us(ctx.redis.pid)}
        mark = ctx.app.mark()
        profiler = await start_py_spy(ctx, phase, server)
        proxy0 = cpu_us(server.pid)
        result = await run_wrk(url, measured, mode, args.duration, connections, args.threads,
                               args.burst, pause_ms)
        proxy1 = cpu_us(server.pid)
        db_us: float | None = None
        if pg is not None:
            db_us = cpu_delta(db0, await pg.cpu())
        elif maria is not None:
            db_us = cpu_delta(db0, await maria.cpu())
        elif phase.server == "competitor" and ctx.redis is not None:
            db_us = cpu_us(ctx.redis.pid) - db0[ctx.redis.pid]
        if profiler is not None:
            await asyncio.wait_for(profiler.proc.wait(), 30)  # it stops after --duration
            await ctx.procs.stop(profiler)
            folded = Path(ctx.args.py_spy) / f"{phase.name}-run{ctx.run + 1}.folded"
            if folded.exists():
                print(profile_summary(folded), file=sys.stderr, flush=True)
        await asyncio.sleep(0.3)  # the last answers' log lines
        # Only this phase's ids: the warm-up's last requests may reach the app after the mark.
        wanted = set(measured_ids)
        if phase.queue:  # accepted events are delivered after their answers: wait for them
            # (bounded: past QUEUE_DRAIN, the check says what is missing)
            await ctx.app.receive(mark, wanted, result.requests,
                                  time.monotonic() + QUEUE_DRAIN,
                                  copies=max(1, phase.destinations))
            # What every delivery cost, to the last one (the app received them all).
            drained_us = cpu_us(server.pid)
            drained_db = await pg.cpu() if pg is not None else None
        forwarded = [i for i in ctx.app.since(mark) if i in wanted]
    finally:
        await ctx.procs.stop(server)
        if not args.keep:  # up to 20 MB each
            for path in ctx.tmp.glob("*.deliveries"):
                path.unlink()
    commits: float | None = None
    fsyncs: float | None = None
    if pg is not None:
        await pg.wait_idle()
        commits = (await pg.commits() - commits0) / max(result.requests, 1)
    elif maria is not None:
        counters = await maria.counters()
        commits, fsyncs = ((counters[name] - counters0[name]) / max(result.requests, 1)
                           for name in COUNTERS)
    (ctx.path(f"{phase.name}.wrk.txt")).write_text(result.text)
    if phase.queue:
        proxy1 = drained_us
        if drained_db is not None:
            db_us = cpu_delta(db0, drained_db)
    out = Result(phase.name, result.rps, result.p50_ms, result.p99_ms,
                 (proxy1 - proxy0) / max(result.requests, 1),
                 None if db_us is None else db_us / max(result.requests, 1), commits,
                 result.requests, None if phase.server == "hello" else len(forwarded),
                 fsyncs=fsyncs)
    out.problems = check(phase, result, forwarded, per)
    if phase.destinations:
        out.forwards = len(forwarded)
    return out


def check(phase: Phase, wrk: WrkResult, forwarded: list[str], burst: int) -> list[str]:
    """What went wrong in a phase: errors, non-2xx answers, ids that ran out, and whether the
    app received what it should have (once per new event, nothing for a duplicate)."""
    problems = [f"{count} {kind} errors" for kind, count in wrk.errors.items()
                if count and kind != "status"]
    if wrk.errors["status"]:
        problems.append(f"{wrk.errors['status']} non-2xx answers")
    if wrk.wrapped and phase.prime == "other":
        problems.append(f"ids ran out: {wrk.wrapped} requests repeated an id this process had "
                        "answered already (raise --unknown-ids)")
    elif wrk.wrapped and phase.server != "hello":  # the hello world reads no id
        problems.append(f"ids ran out: {wrk.wrapped} requests were duplicates (raise "
                        "--max-rate)")
    if phase.server == "hello":
        return problems
    distinct = len(set(forwarded))
    if phase.destinations:  # each event once per destination
        counts = Counter(Counter(forwarded).values())
        wrong = {times: n for times, n in counts.items() if times != phase.destinations}
        if wrong:
            problems.append(f"events received other than {phase.destinations} times: "
                            + ", ".join(f"{n} {times}×" for times, n in sorted(wrong.items())))
        forwarded = sorted(set(forwarded))
    elif distinct != len(forwarded):
        problems.append(f"the app received {len(forwarded) - distinct} events twice")
    if phase.workload == "dup" and forwarded:
        problems.append(f"{len(forwarded)} duplicates reached the app")
    elif phase.workload == "new" and not wrk.requests <= len(forwarded) <= wrk.calls:
        # Every answered request was forwarded; so, perhaps, were those still in flight when
        # wrk stopped (sent, never answered): at most one per connection.
        problems.append(f"the app received {len(forwarded)} for {wrk.requests} requests "
                        f"({wrk.calls} sent)")
    elif phase.workload == "burst" and not (
            wrk.requests // burst <= len(forwarded) <= math.ceil(wrk.calls / burst)):
        problems.append(f"the app received {len(forwarded)} events for {wrk.requests} "
                        f"requests in bursts of {burst}")
    return problems
