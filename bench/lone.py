"""A lone delivery's added latency: new Stripe events, one at a time, through webhook-sidecar on
PostgreSQL and straight to the app, side by side.

    .venv/bin/python -m bench.lone [--deliveries 300] [--interval 20] [--runs 3] [--phases]
                                   [--provider stripe|github] [--tree DIR[,KEY=VALUE…] …]

``--provider github`` sends new GitHub push deliveries instead (bench/wrk/deliveries.py: a
fresh delivery id and a body unique to it, signed as GitHub does): the preset whose replay
guard binds each new body, so its cost shows beside the claim's.

Each run starts the app (bench/app_fast.py, or nginx when installed, as bench.wrk does), and
one webhook-sidecar per ``--tree`` (default: this checkout; give another git worktree, e.g. one
of ``main``, to measure before and after in one run; ``DIR,store.result_commit=no_wait``
sets config keys of that proxy, so one tree can run twice, with and without), each on a fresh
PostgreSQL database
($SIDECAR_BENCH_PG_DSN's server, else 127.0.0.1:5432), migrated. It then sends
``--deliveries`` new Stripe events (a fresh ``evt_…`` id each, signed with the Stripe scheme)
to each target in turn — straight to the app, then through each proxy — one request every
``--interval`` ms in all, so exactly one request is ever in flight and every process is idle
between them. Each target has one keep-alive connection of its own; a request is timed from
its first byte written to the answer's last byte read. Prints p50/p90/p99 per target and what
each proxy adds over going straight to the app (its percentile minus the app's), per run and
as medians over runs.

``--phases`` runs the proxies at ``log.level: debug``, where each delivery logs a
``delivery_phases`` line (``sidecar.core.phases``: marks from the request's first byte to its
answer's last byte handed to the kernel); the bench prints the median of each phase. Proxies
from a tree without phase marks print none.

With ``--phases`` it also checks a lone delivery's goals, from the medians over runs: the
proxy's "own time" — its added p50 minus the median claim statement and the median record
statement (the ``*_statement`` marks: claim, a replay guard's bind, the result's write) — at
most 0.5 ms; and each of those statements no slower than the bare prepared ``INSERT … ON
CONFLICT DO NOTHING`` + commit's p50 timed in the same run.

Not part of the test suite. Results: docs/benchmarks.md, "A lone delivery".
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import yaml

from bench.common import signer
from bench.wrk import deliveries as github
from bench.wrk.app import App
from bench.wrk.procs import REPO, BenchError, Proc, Procs, wait_listening
from bench.wrk.stores import PgStore, migrate

SECRET = "whsec_bench_lone_0123456789abcdef"
PATH = "/webhooks/stripe"
PATHS = {"stripe": PATH, "github": github.PATH}
PROBE = "pg: INSERT+commit"
OWN_GOAL_MS = 0.5  # a lone delivery's own time beyond its store round trips, at p50
WARMUP = 30  # deliveries per target before the measured ones (connections, caches, plans)
PERCENTILES = (50, 90, 99)


@dataclass
class Target:
    """Where requests go: the app itself, or a proxy started from a source tree."""

    name: str
    host: str
    port: int
    path: str
    proc: Proc | None = None
    log: Path | None = None
    times_ms: list[float] = field(default_factory=list)
    reader: asyncio.StreamReader | None = None
    writer: asyncio.StreamWriter | None = None

    async def connect(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError):
                await self.writer.wait_closed()

    async def send(self, body: bytes, headers: dict[str, str]) -> float:
        """One POST on the keep-alive connection; milliseconds from first byte out to last in."""
        assert self.reader is not None and self.writer is not None
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        request = (f"POST {self.path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n{head}"
                   f"Content-Length: {len(body)}\r\n\r\n").encode() + body
        started = time.perf_counter_ns()
        self.writer.write(request)
        status_line = await self.reader.readline()
        length = 0
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        await self.reader.readexactly(length)
        elapsed = (time.perf_counter_ns() - started) / 1e6
        status = int(status_line.split()[1])
        if status != 200:
            raise BenchError(f"{self.name} answered {status_line!r}")
        return elapsed


class PgProbe:
    """The database's floor, sent in turn with the deliveries: a prepared ``INSERT … ON
    CONFLICT DO NOTHING`` with its commit, or ``SELECT 1``, on a connection of its own."""

    def __init__(self, name: str, dsn: str, sql: str) -> None:
        self.name, self.dsn, self.sql = name, dsn, sql
        self.times_ms: list[float] = []
        self.proc: Proc | None = None
        self.log: Path | None = None
        self.conn: Any = None
        self.statement: Any = None

    async def connect(self) -> None:
        self.conn = await asyncpg.connect(self.dsn)
        await self.conn.execute("CREATE TABLE IF NOT EXISTS bench_probe (k text PRIMARY KEY)")
        self.statement = await self.conn.prepare(self.sql)

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()

    async def send(self, body: bytes, headers: dict[str, str]) -> float:
        args = [secrets.token_hex(12)] if "$1" in self.sql else []
        started = time.perf_counter_ns()
        await self.statement.fetch(*args)
        return (time.perf_counter_ns() - started) / 1e6


def stripe_event(event_id: str) -> bytes:
    return json.dumps({"id": event_id, "object": "event", "api_version": "2024-04-10",
                       "created": int(time.time()), "type": "payment_intent.succeeded",
                       "livemode": False, "pending_webhooks": 1,
                       "data": {"object": {"id": f"pi_{event_id[4:]}",
                                           "object": "payment_intent", "amount": 2000,
                                           "currency": "usd", "status": "succeeded"}}},
                      separators=(",", ":")).encode()


def sidecar_config(tmp: Path, name: str, app_url: str, dsn: str, log_level: str,
                   provider: str = "stripe", settings: Sequence[tuple[str, str]] = ()) -> Path:
    providers = {
        "stripe": {"path": PATH, "preset": "stripe", "secrets": [SECRET]},
        "github": {"path": github.PATH, "preset": "github", "secrets": [github.SECRET]},
    }
    config: dict[str, Any] = {
        "listen": "127.0.0.1:0", "admin_listen": "127.0.0.1:0", "shutdown_timeout": "2s",
        "upstream": {"url": app_url, "timeout": "5s"},
        "store": {"url": dsn, "pool_max_size": 10},
        "log": {"level": log_level, "format": "json"},
        "maintenance": {"interval": "1h"},
        "providers": {provider: providers[provider]},
    }
    for key, value in settings:  # dotted paths: store.result_commit=no_wait
        *parents, last = key.split(".")
        block = config
        for parent in parents:
            block = block.setdefault(parent, {})
        block[last] = yaml.safe_load(value)
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def percentile(values: Sequence[float], p: float) -> float:
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(p / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def phase_medians(log: Path, skip: int) -> dict[str, float]:
    """Each phase's median (ms) over the proxy's ``delivery_phases`` lines, after the first
    ``skip`` (the warm-up), in the order the phases come."""
    rows: list[dict[str, float]] = []
    for line in log.read_text(errors="replace").splitlines():
        if '"delivery_phases"' not in line:
            continue
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            if entry.get("event") == "delivery_phases":
                rows.append(entry["phases_ms"])
    rows = rows[skip:]
    names: list[str] = []
    for row in rows:
        names += [name for name in row if name not in names]
    return {name: statistics.median(row.get(name, 0.0) for row in rows) for name in names}


def delivery_fields(log: Path, skip: int) -> dict[str, float]:
    """Medians of the ``delivery`` line's timings (``latency_ms``, ``claim_ms``, …)."""
    values: dict[str, list[float]] = {}
    count = 0
    for line in log.read_text(errors="replace").splitlines():
        if '"delivery"' not in line:
            continue
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            if entry.get("event") != "delivery":
                continue
            count += 1
            if count <= skip:
                continue
            for key, value in entry.items():
                if key.endswith("_ms") and isinstance(value, int | float):
                    values.setdefault(key, []).append(float(value))
    return {key: statistics.median(v) for key, v in values.items()}


async def one_run(args: argparse.Namespace, run: int, pg: PgStore, tmp: Path
                  ) -> dict[str, Any]:
    procs = Procs()
    tmp = tmp / f"run{run}"  # each run's app logs where it listens: its own file
    await asyncio.to_thread(tmp.mkdir)
    app = App(procs, tmp, "asyncio")
    targets: list[Target | PgProbe] = []
    probe_db = f"{pg.name}_probe"
    try:
        await app.start()
        app_host, _, app_port = app.url.removeprefix("http://").rpartition(":")
        path = PATHS[args.provider]
        targets.append(Target("app", app_host, int(app_port), path))
        for index, (tree, settings) in enumerate(args.trees):
            name = f"proxy:{tree.name}" + "".join(f",{k}={v}" for k, v in settings)
            if any(t.name == name for t in targets):
                name = f"{name}#{index}"
            db = f"{pg.name}_{index}"
            await pg.create(db, pg.template)
            config = sidecar_config(tmp, f"run{run}-{index}", app.url, pg.dsn(db),
                                    "debug" if args.phases else "info", args.provider,
                                    settings)
            log = tmp / f"run{run}-{index}.log"
            proc = await procs.start(name, [sys.executable, "-m", "sidecar", "run", "--config",
                                            str(config)], log,
                                     env={"PYTHONUNBUFFERED": "1"}, cwd=tree)
            host, _, port = (await wait_listening(proc)).rpartition(":")
            targets.append(Target(name, host, int(port), path, proc, log))
        if args.probes:
            await pg.create(probe_db)
            targets += [PgProbe(PROBE, pg.dsn(probe_db),
                                "INSERT INTO bench_probe VALUES ($1) ON CONFLICT DO NOTHING"),
                        PgProbe("pg: SELECT 1", pg.dsn(probe_db), "SELECT 1")]
        for target in targets:
            await target.connect()
        sign = signer({"upstream": {"url": app.url}, "providers": {
            "stripe": {"path": PATH, "preset": "stripe", "secrets": [SECRET]}}})
        interval = args.interval / 1000
        next_at = time.monotonic()
        for i in range(WARMUP + args.deliveries):
            for target in targets:
                if args.provider == "github":
                    delivery_id = github.new_ids(1)[0]
                    body = github.body_of(delivery_id)
                    headers = github.headers_of(delivery_id, body)
                else:
                    body = stripe_event(f"evt_{secrets.token_hex(12)}")
                    headers = {"Content-Type": "application/json", **sign(body)}
                elapsed = await target.send(body, headers)
                if i >= WARMUP:
                    target.times_ms.append(elapsed)
                next_at += interval
                # Pacing (not synchronisation): every process idle before the next request.
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        for target in targets:
            await target.close()
        for target in targets:
            if target.proc is not None:
                await procs.stop(target.proc)
    finally:
        await procs.stop_all()
        for db in [*(f"{pg.name}_{i}" for i in range(len(args.trees))), probe_db]:
            with contextlib.suppress(Exception):
                await pg.drop(db)
    result: dict[str, Any] = {"targets": {}}
    direct = targets[0]
    for target in targets:
        pcts = {p: percentile(target.times_ms, p) for p in PERCENTILES}
        entry: dict[str, Any] = {"pct": pcts}
        if target.proc is not None:
            entry["added"] = {p: pcts[p] - percentile(direct.times_ms, p) for p in PERCENTILES}
            assert target.log is not None
            entry["fields"] = delivery_fields(target.log, WARMUP)
            if args.phases:
                entry["phases"] = phase_medians(target.log, WARMUP)
        result["targets"][target.name] = entry
    return result


def show_run(run: int, result: dict[str, Any]) -> None:
    print(f"run {run}:")
    for name, entry in result["targets"].items():
        pct = " ".join(f"p{p} {v:6.2f}" for p, v in entry["pct"].items())
        added = ("" if "added" not in entry else "  added " +
                 " ".join(f"p{p} {v:+6.2f}" for p, v in entry["added"].items()))
        print(f"  {name:<24} {pct} ms{added}")
        if entry.get("fields"):
            print("    delivery line (median ms): " + ", ".join(
                f"{k} {v:.2f}" for k, v in entry["fields"].items()))
        if entry.get("phases"):
            print("    phases (median ms): " + ", ".join(
                f"{k} {v:.3f}" for k, v in entry["phases"].items()))
    sys.stdout.flush()


def show_medians(results: list[dict[str, Any]]) -> None:
    print(f"medians over {len(results)} runs (ms):")
    for name in results[0]["targets"]:
        entries = [r["targets"][name] for r in results]
        pct = " ".join(f"p{p} {statistics.median(e['pct'][p] for e in entries):6.2f}"
                       for p in PERCENTILES)
        line = f"  {name:<24} {pct}"
        if "added" in entries[0]:
            line += "  added " + " ".join(
                f"p{p} {statistics.median(e['added'][p] for e in entries):+6.2f}"
                for p in PERCENTILES)
        print(line)
        if entries[0].get("phases"):
            names = list(entries[0]["phases"])
            print("    phases: " + ", ".join(
                f"{k} {statistics.median(e['phases'].get(k, 0.0) for e in entries):.3f}"
                for k in names))


def statement_times(phases: dict[str, float]) -> tuple[float, float]:
    """(claim, record): the median ms of the delivery's claim statements (the claim, a replay
    guard's bind riding with it) and of its record statements, from its phase marks named
    ``<statement>_statement`` (``sidecar.core.phases``)."""
    claim = record = 0.0
    for name, value in phases.items():
        if not name.endswith("_statement"):
            continue
        if name.startswith(("claim", "bind", "guard")):
            claim += value
        elif name.startswith(("complete", "record", "result")):
            record += value
    return claim, record


def show_goals(results: list[dict[str, Any]]) -> None:
    """A lone delivery's goals, from the medians over runs: the proxy's own time (added p50
    minus its claim and record statements) at most ``OWN_GOAL_MS``; each statement no slower
    than the bare prepared ``INSERT`` + commit (p50) timed beside it."""
    names = list(results[0]["targets"])
    bare = None
    if PROBE in names:
        bare = statistics.median(r["targets"][PROBE]["pct"][50] for r in results)
    print("goals (medians over runs, ms):")
    for name in names:
        entries = [r["targets"][name] for r in results]
        if "added" not in entries[0]:
            continue
        if not entries[0].get("phases"):
            print(f"  {name:<24} own time needs --phases (the statement marks)")
            continue
        added = statistics.median(e["added"][50] for e in entries)
        claim = statistics.median(statement_times(e["phases"])[0] for e in entries)
        record = statistics.median(statement_times(e["phases"])[1] for e in entries)
        own = added - claim - record
        line = (f"  {name:<24} added p50 {added:+.2f} - claim {claim:.2f} - record "
                f"{record:.2f} = own {own:.2f} "
                f"({'met' if own <= OWN_GOAL_MS else 'MISSED'}: <= {OWN_GOAL_MS})")
        if bare is not None:
            verdicts = ", ".join(
                f"{what} {'met' if value <= bare else 'MISSED'}"
                for what, value in (("claim", claim), ("record", record)) if value)
            line += f"; statements <= bare INSERT+commit p50 {bare:.2f}: {verdicts}"
        print(line)


def keep_logs(tmp: Path, run: int, keep: Path) -> None:
    keep.mkdir(parents=True, exist_ok=True)
    for log in (tmp / f"run{run}").glob(f"run{run}-*.log"):
        shutil.copyfile(log, keep / log.name)


def load() -> str:
    with contextlib.suppress(OSError):
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    return "?"


async def main_async(args: argparse.Namespace) -> int:
    admin = os.environ.get("SIDECAR_BENCH_PG_DSN",
                           "postgresql://postgres@127.0.0.1:5432/postgres")
    pg = PgStore(admin)
    await pg.open()
    results: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench-lone-") as tmp_name:
            tmp = Path(tmp_name)
            await pg.create(pg.template)
            # Any tree's migrations will do for the template: the schema is the same.
            await migrate(sidecar_config(tmp, "migrate", "http://127.0.0.1:1",
                                         pg.dsn(pg.template), "info"))
            print(f"load average before: {load()}; {os.cpu_count()} CPUs; "
                  f"PostgreSQL {pg.version}; {args.deliveries} new {args.provider} deliveries "
                  f"per target, "
                  f"one request every {args.interval:g} ms", flush=True)
            for run in range(1, args.runs + 1):
                result = await one_run(args, run, pg, tmp)
                results.append(result)
                show_run(run, result)
                if args.keep:
                    await asyncio.to_thread(keep_logs, tmp, run, args.keep)
    finally:
        await pg.close()
    show_medians(results)
    show_goals(results)
    print(f"load average after: {load()}")
    return 0


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.lone",
                                     description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--deliveries", type=int, default=300, help="measured, per target")
    parser.add_argument("--interval", type=float, default=20.0,
                        help="ms between two requests (default 20)")
    parser.add_argument("--runs", type=int, default=1, help="the medians are over the runs")
    parser.add_argument("--phases", action="store_true",
                        help="per-phase breakdown (proxies at log.level debug)")
    parser.add_argument("--provider", choices=sorted(PATHS), default="stripe",
                        help="whose new events to send (default stripe)")
    parser.add_argument("--tree", dest="trees", action="append",
                        help="a source tree to run a proxy from, optionally with config keys "
                             "(DIR,store.result_commit=no_wait; repeatable; default: this one)")
    parser.add_argument("--no-probes", dest="probes", action="store_false",
                        help="leave out the bare INSERT and SELECT 1 timed alongside")
    parser.add_argument("--keep", metavar="DIR", type=Path,
                        help="copy the proxies' logs into DIR")
    args = parser.parse_args(argv)
    args.trees = [_tree(tree) for tree in args.trees or [str(REPO)]]
    return args


def _tree(spec: str) -> tuple[Path, list[tuple[str, str]]]:
    """``DIR[,KEY=VALUE…]``: a source tree and the config keys its proxy runs with."""
    tree, *pairs = spec.split(",")
    settings = [(key, value) for key, _, value in (pair.partition("=") for pair in pairs)]
    return Path(tree).resolve(), settings


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return asyncio.run(main_async(args))
    except BenchError as exc:
        print(f"bench.lone: {exc}", file=sys.stderr)
        return exc.code
    except (OSError, asyncpg.PostgresError) as exc:
        print(f"bench.lone: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
