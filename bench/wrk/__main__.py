"""``python -m bench.wrk``: the command line (the package's docstring says what it measures)."""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from bench import wrk
from bench.wrk.app import App
from bench.wrk.context import Context
from bench.wrk.mariadb import MariaStore
from bench.wrk.measure import run_phase
from bench.wrk.phases import (
    NOT_BY_DEFAULT,
    OPTIONAL,
    PHASES,
    STORES,
    Result,
    run_order,
    with_before,
    with_stores,
)
from bench.wrk.procs import REPO, BenchError, Procs
from bench.wrk.report import DOCS, report, write_docs
from bench.wrk.servers import ensure_competitor, prepare_stores
from bench.wrk.stores import PgStore
from tests.pgserver import ThrowawayCluster


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.wrk", description=(wrk.__doc__ or "").split("\n\n")[0],
        epilog="Phases: " + ", ".join(PHASES) + ". Competitor phases need node, npm and "
        "redis-server and are skipped without them.")
    parser.add_argument("--store", default="postgres", metavar="STORE[,STORE]",
                        help="webhook-sidecar's store: " + ", ".join(STORES) + " (a private "
                        "mariadbd, every commit fsynced); several, comma-separated, run each "
                        "webhook-sidecar phase on each, interleaved in every run, side by side "
                        "in the report (default: postgres)")
    parser.add_argument("--private-pg", action="store_true",
                        help="PostgreSQL: a private cluster (initdb, fsync on, default "
                        "settings) started for the run, instead of $SIDECAR_BENCH_PG_DSN's "
                        "server: its CPU is then the benchmark's alone, like MariaDB's")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per phase")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds before each phase")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="wrk threads")
    parser.add_argument("--phases", default=",".join(p for p in PHASES if p not in NOT_BY_DEFAULT),
                        help="comma-separated, in this order (default: all but "
                        + ", ".join(sorted(NOT_BY_DEFAULT)) + ")")
    parser.add_argument("--runs", type=int, default=1,
                        help="repeat all phases, interleaved; the table gives medians")
    parser.add_argument("--seed-rows", type=int, default=0,
                        help="done rows in each database before a webhook-sidecar phase")
    parser.add_argument("--dup-ids", type=int, default=1000,
                        help="distinct ids the known-duplicate phases repeat (default 1000)")
    parser.add_argument("--unknown-ids", type=int, default=20_000,
                        help="ids another process delivers first for dups-unknown, each then "
                        "sent once (default 20000: enough for 2000 req/s over 10 s)")
    parser.add_argument("--burst", type=int, default=50, help="copies of each burst event")
    parser.add_argument("--max-rate", type=float, default=20_000,
                        help="req/s the new-event id files are sized for (default 20000)")
    parser.add_argument("--settle", type=float, default=10.5,
                        help="PostgreSQL: idle seconds after the warm-up so that sessions "
                        "flush their commit counts (they do within 10 s)")
    parser.add_argument("--loop", choices=["auto", "uvloop", "asyncio"], default="auto",
                        help="event loop of the bench servers (pass-through, hello)")
    parser.add_argument("--sidecar-loop", choices=["asyncio", "uvloop"], default="asyncio",
                        help="webhook-sidecar's event loop (default asyncio, as shipped; "
                        "uvloop to measure what switching would give)")
    parser.add_argument("--log-level", default="info", help="webhook-sidecar's log level")
    parser.add_argument("--py-spy", metavar="DIR",
                        help="profile each Python server's measured window with py-spy into "
                        "DIR/<phase>-run<N>.folded (collapsed stacks: speedscope.app, "
                        "flamegraph.pl) and print its top functions")
    parser.add_argument("--before", type=Path, metavar="DIR",
                        help="another source tree of webhook-sidecar (a git worktree or "
                        "`git archive` of an older commit): each webhook-sidecar phase also "
                        "runs from it, as <phase>@before, beside this tree's, in every run")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    parser.add_argument("--write-docs", action="store_true",
                        help=f"replace the marked results section of {DOCS.relative_to(REPO)} "
                        "(with several stores: the section putting them side by side)")
    args = parser.parse_args(argv)
    args.phase_list = [p.strip() for p in args.phases.split(",") if p.strip()]
    args.stores = list(dict.fromkeys(s.strip() for s in args.store.split(",") if s.strip()))
    if not args.stores or set(args.stores) - set(STORES):
        parser.error(f"--store {args.store}: each one of {', '.join(STORES)}")
    if "mariadb" in args.stores and args.seed_rows:
        parser.error("--seed-rows is for postgres and sqlite only")
    unknown = [p for p in args.phase_list if p not in PHASES]
    if unknown:
        parser.error(f"unknown phase(s) {', '.join(unknown)}; known: {', '.join(PHASES)}")
    if args.before is not None:
        args.before = args.before.resolve()
        if not (args.before / "sidecar" / "__main__.py").is_file():
            parser.error(f"--before {args.before}: not a webhook-sidecar source tree")
        args.phase_list = with_before(args.phase_list)
    if len(args.stores) > 1:
        if args.before is not None:
            parser.error("--before runs with one --store")
        paced = [p for p in args.phase_list if PHASES[p].half_of]
        if paced:  # paced at one phase's rate: which store's would be arbitrary
            parser.error(f"{', '.join(paced)}: run with one --store")
        args.phase_list = with_stores(args.phase_list, args.stores)
    return args


def check_tools(args: argparse.Namespace) -> list[str]:
    """Exit 2 without wrk; drop the competitor phases (with a note) without node/redis."""
    if shutil.which("wrk") is None:
        raise BenchError("wrk is not installed: Debian/Ubuntu `apt-get install -y wrk`, "
                         "macOS `brew install wrk`, or build https://github.com/wg/wrk", 2)
    if args.sidecar_loop == "uvloop" or args.loop == "uvloop":
        try:
            import uvloop  # noqa: F401
        except ImportError:
            raise BenchError("uvloop is not installed: .venv/bin/pip install uvloop", 2) from None
    if args.py_spy is not None and shutil.which("py-spy") is None:
        raise BenchError("--py-spy needs py-spy on PATH (pip install py-spy)", 2)
    if args.py_spy is not None:
        Path(args.py_spy).mkdir(parents=True, exist_ok=True)
    phases = list(args.phase_list)
    missing = [tool for tool in ("node", "npm", "redis-server") if shutil.which(tool) is None]
    if missing and OPTIONAL & set(phases):
        explicit = "--phases" in " ".join(sys.argv)
        message = (f"{', '.join(missing)} not found: the competitor phases need Node.js 20 "
                   "with npm (Debian: apt-get install nodejs npm) and redis-server "
                   "(apt-get install redis-server)")
        if explicit:
            raise BenchError(message, 2)
        print(f"note: {message}; skipping them", file=sys.stderr)
        phases = [p for p in phases if p not in OPTIONAL]
    return phases


def loop_label(choice: str) -> str:
    if choice != "asyncio":
        try:
            import uvloop
        except ImportError:
            return "asyncio (uvloop not installed)"
        return f"uvloop {getattr(uvloop, '__version__', '')}".strip()
    return "asyncio"


async def bench(args: argparse.Namespace, phases: list[str], tmp: Path) -> int:
    procs = Procs()
    app = App(procs, tmp, args.loop)
    ctx = Context(args, tmp, procs, app)
    cluster: ThrowawayCluster | None = None
    try:
        ctx.loop_name = loop_label(args.loop)
        used = {ctx.store_of(PHASES[p]) for p in phases if PHASES[p].server == "sidecar"}
        if "postgres" in used:
            dsn = os.environ.get("SIDECAR_BENCH_PG_DSN",
                                 "postgresql://postgres@127.0.0.1:5432/postgres")
            if args.private_pg:
                cluster = ThrowawayCluster(tmp / "pg", fsync=True)
                # Not in a thread: its processes are stopped by cleanup() below.
                cluster.start()
                dsn = cluster.dsn
            ctx.pg = PgStore(dsn)
            await ctx.pg.open()
        if "mariadb" in used:
            ctx.maria = MariaStore()
            await ctx.maria.open()
        await app.start()
        await prepare_stores(ctx)
        if OPTIONAL & set(phases):
            await ensure_competitor(ctx)
        results: dict[str, list[Result]] = {name: [] for name in phases}
        ctx.results = results
        for run in range(args.runs):
            ctx.run = run
            for name in run_order(phases, run):
                print(f"run {run + 1}/{args.runs}: {name}…", file=sys.stderr, flush=True)
                result = await run_phase(ctx, PHASES[name])
                results[name].append(result)
                print(f"  {result.rps:,.0f} req/s, p50 {result.p50_ms:.1f} ms, proxy "
                      f"{result.proxy_us:,.0f} µs/req"
                      + (f", store {result.db_us:,.0f} µs/req" if result.db_us else "")
                      + (f", commits {result.commits:.2f}/req" if result.commits else "")
                      + (f", fsyncs {result.fsyncs:.2f}/req" if result.fsyncs else "")
                      + (f"; PROBLEMS: {'; '.join(result.problems)}" if result.problems
                         else ""), file=sys.stderr, flush=True)
        text, ok = report(ctx, results)
        print(text)
        if args.write_docs:
            write_docs(text, len(args.stores))
            print(f"wrote {DOCS.relative_to(REPO)}", file=sys.stderr)
        return 0 if ok else 1
    finally:
        await procs.stop_all()
        if ctx.pg is not None:
            await ctx.pg.close()
        if ctx.maria is not None:
            await ctx.maria.close()
        if cluster is not None:
            await asyncio.to_thread(cluster.cleanup)


def main() -> None:
    args = parse_args()
    try:
        phases = check_tools(args)
    except BenchError as exc:
        print(f"bench.wrk: {exc}", file=sys.stderr)
        sys.exit(exc.code)
    tmp = Path(tempfile.mkdtemp(prefix="bench-wrk-"))

    async def guarded() -> int:
        task = asyncio.current_task()
        assert task is not None
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        return await bench(args, phases, tmp)

    code = 1
    try:
        code = asyncio.run(guarded())
    except BenchError as exc:
        print(f"bench.wrk: {exc}", file=sys.stderr)
        code = exc.code
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("bench.wrk: interrupted; processes stopped, databases dropped", file=sys.stderr)
        code = 130
    finally:
        if args.keep or code not in (0, 130):
            print(f"work directory (logs, wrk output): {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(code)


if __name__ == "__main__":
    main()
