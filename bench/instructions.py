"""Instructions per request, beside the bare pass-through: what webhook-sidecar's own process
executes for a known duplicate and for a new event, and what bench/passthrough.py executes for
the same requests, counted by valgrind's callgrind (the count barely moves with the machine's
load; CPU µs per request does, a lot, on a shared box). With ``--phases``, the same for a lone
delivery, split by phase.

    .venv/bin/python -m bench.instructions [--tree DIR …] [--loop asyncio,uvloop]
                                           [--kind dups,new] [--requests 500] [--runs 3]
    .venv/bin/python -m bench.instructions --phases [--kind new] [--requests 100] [--runs 3]

For each run, ``--tree`` (default: this checkout; give a worktree of ``main`` to compare before
and after in one run), ``--loop`` and ``--kind``, each proxy starts under
``valgrind --tool=callgrind --instr-atstart=no``: webhook-sidecar (GitHub preset, log level
info; launched as ``python -c`` on uvloop's policy for ``uvloop``, with
``WEBHOOK_SIDECAR_LOOP`` set to the loop too, for trees that choose it themselves) and then
the pass-through on the same loop (``bench/passthrough.py --loop``). The app is nginx
(``return 200``), else bench/app_fast.py.

Kinds (each on a fresh store per proxy):

- ``dups``: ``--ids`` events are delivered once (forwarded), then once more (answered from
  memory: warm-up); counted: ``--requests`` duplicates of them, round robin. Store:
  ``--dups-store``, SQLite by default (a known duplicate asks no store).
- ``new``: ``--ids`` new events as warm-up; counted: ``--requests`` new events, each forwarded.
  Store: ``--new-store``, PostgreSQL by default: a fresh database per proxy run on
  $SIDECAR_BENCH_PG_DSN's server (else 127.0.0.1:5432 as user postgres), migrated by the
  tree's own ``sidecar migrate``, dropped after; ``mariadb``: the same on a private mariadbd
  (bench/mariadbd.py, every commit fsynced).

Counted requests go over ``--connections`` keep-alive connections, one request in flight on
each, between ``callgrind_control -i on`` and ``-i off``; the pass-through gets the same
requests over the same connections. Prints, per run and as medians over runs: Ir per request,
times the pass-through's, and the goals (new events at most 2.0 times, known duplicates 0.7;
exit 3 when one is missed). Each proxy also reports CPU µs per request under valgrind,
meaningless in absolute terms and shown only as a sanity check.

``--phases``: a lone delivery — one connection, one request at a time — split into phases.
Each proxy runs twice: plain (its total Ir per request) and through bench/phase_marks.py,
which calls libc ``getsid`` at every phase boundary, valgrind cutting its counts there
(``--dump-before=getsid --combine-dumps=yes``); each cut's instructions go to the phase the
boundary ended: parse (the request read), verify, claim, forward, record, answer (the answer
built and written), observe (the delivery's log line and count) and loop (between an
answer written and the next request's first byte; other metrics are in the phase that records
them); the pass-through has parse, forward, answer, loop. Both runs count the same window,
from arming (``gc.collect(); gc.freeze()``, so the warm-up's heap is not scanned inside it) to
request N + 1's first byte. Prints Ir per request by phase, the marked total beside the plain
one (the markers' cost) and the boundaries each tree had; when a marked total is more than 5 %
off its plain one, the phases again, each run's scaled to add up to its plain total (the
header says so). ``--keep DIR`` keeps each run's callgrind file and boundaries there, for
``callgrind_annotate``.

Time-driven background work is stretched to an hour: under valgrind a request takes tens of
times longer, so a timer would weigh tens of times more per request than at full speed,
more still in the slower marked run. Every run's configuration sets ``maintenance.interval``
and ``maintenance.secrets_reload_interval`` (where the tree has it); the lone runs, plain
and marked, also go through bench/phase_marks.py, which stretches the provider states'
refresh (every 0.5 s) and the overview page's counter sample (every 10 s, some 3.3 M
instructions each time). What is left of background work is its own row, "background". A new
event is cut 16 times, a known duplicate 8, each cut a dump of tens of KB; the hooks alone
(without the cuts) add about 1 %. ``--phases --kind new,dups --requests 30 --runs 1`` on
one tree and loop takes 4 to 5 minutes on a loaded 2-core machine; a counting run (without
``--phases``) of one tree, one loop, both kinds at 200 requests, about 2.

Counts user-space instructions only: system calls' kernel time is not in it, so a lever that
saves a write() or an epoll turn shows less here than in CPU time. Needs valgrind
(``apt-get install valgrind``), and uvloop for ``--loop uvloop`` (``.venv/bin/pip install
uvloop``). Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from bench.phase_marks import PHASES, attribute, callgrind_parts
from bench.wrk.app import App
from bench.wrk.deliveries import PATH, SECRET, body_of, headers_of, new_ids
from bench.wrk.mariadb import MariaStore
from bench.wrk.procs import REPO, BenchError, Proc, Procs, cpu_us, die_with_parent, wait_listening
from bench.wrk.stores import PgStore

# `python -m sidecar` on uvloop's loop, for trees that do not read WEBHOOK_SIDECAR_LOOP.
UVLOOP = ("import asyncio, sys, uvloop; "
          "asyncio.set_event_loop_policy(uvloop.EventLoopPolicy()); "
          "from sidecar.cli import main; raise SystemExit(main(sys.argv[1:]))")
MARKER = REPO / "bench" / "phase_marks.py"
GOALS = {"new": 2.0, "dups": 0.7}  # at most this many times the pass-through's Ir per request
KIND_NAMES = {"dups": "known duplicates", "new": "new events"}
# The cuts' files are large: only what the totals need.
CUT_OPTIONS = ["--dump-before=getsid", "--combine-dumps=yes", "--dump-instr=no",
               "--dump-line=no", "--compress-strings=yes", "--compress-pos=yes"]


@dataclass
class Measured:
    """One proxy's counts: Ir and CPU µs (under valgrind) per request; by phase when cut."""

    ir: float
    cpu: float
    phases: dict[str, float] = field(default_factory=dict)
    marked_ir: float = 0.0
    hooks: list[str] = field(default_factory=list)
    loop: str = ""


@dataclass
class Started:
    """A proxy under callgrind: its address, its callgrind file, its cuts' file and the file
    that arms the cuts, its PostgreSQL database."""

    proc: Proc
    url: str
    out: Path
    cuts: Path
    arm: Path
    database: str | None


@dataclass
class Target:
    """What one measurement runs: a proxy, from a tree, on a loop, for a kind of request."""

    server: str  # sidecar | passthrough
    tree: Path
    loop: str
    kind: str
    store: str  # sqlite | postgres | mariadb (sidecar only)

    @property
    def label(self) -> str:
        if self.server == "passthrough":
            return f"pass-through on {self.loop}"
        return f"{self.tree} on {self.loop}"


def knows(tree: Path, key: str) -> bool:
    """Whether the tree's configuration declares ``key`` (older trees reject unknown keys)."""
    return any(key in module.read_text(errors="replace")
               for module in (tree / "sidecar" / "config").glob("*.py"))


def config(tmp: Path, name: str, app_url: str, store_url: str, tree: Path = REPO) -> Path:
    path = tmp / f"{name}.yaml"
    # Time-driven background work, stretched: under valgrind tens of times slower, it would
    # weigh tens of times more per request than at full speed (the secret files' check runs
    # every 10 s by default, in a thread).
    maintenance = {"interval": "1h"}
    if knows(tree, "secrets_reload_interval"):
        maintenance["secrets_reload_interval"] = "1h"
    store: dict[str, object] = {"url": store_url, "pool_max_size": 10}
    if not store_url.startswith("sqlite"):
        # Under valgrind, on a loaded machine, a call can take seconds: no 503 for that.
        store.update(statement_timeout="60s", acquire_timeout="30s", lock_timeout="30s")
    path.write_text(yaml.safe_dump({
        "listen": "127.0.0.1:0", "admin_listen": "127.0.0.1:0", "shutdown_timeout": "2s",
        "upstream": {"url": app_url, "timeout": "20s"},
        "store": store,
        "log": {"level": "info", "format": "json"},
        "maintenance": maintenance,
        "providers": {"github": {"path": PATH, "preset": "github", "secrets": [SECRET]}},
    }))
    return path


def request_of(delivery_id: str, host: str) -> bytes:
    body = body_of(delivery_id)
    head = "".join(f"{k}: {v}\r\n" for k, v in headers_of(delivery_id, body).items())
    return (f"POST {PATH} HTTP/1.1\r\nHost: {host}\r\n{head}"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


async def send_all(url: str, ids: list[str], requests: int, connections: int, *,
                   replay: bool) -> None:
    """``requests`` requests, round robin over ``ids``, on ``connections`` keep-alive
    connections, one request in flight on each; every answer must be a 200, a replay (a
    duplicate answered by webhook-sidecar) exactly when ``replay``."""
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
                replayed = b"x-webhook-sidecar-replay: true" in head.lower()
                if not head.startswith(b"HTTP/1.1 200 ") or replayed != replay:
                    raise BenchError(f"not a {'replay' if replay else 'forward'}: "
                                     f"{head[:200]!r}")
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


class Bench:
    """One invocation: the app, the PostgreSQL server, the processes, the temporary files."""

    def __init__(self, args: argparse.Namespace, tmp: Path) -> None:
        self.args, self.tmp = args, tmp
        self.procs = Procs()
        self.app = App(self.procs, tmp, "auto")
        self.pg: PgStore | None = None
        self.maria: MariaStore | None = None
        self.serial = 0

    async def store_url(self, target: Target, name: str) -> str:
        if target.store == "sqlite":
            return f"sqlite:///{self.tmp / name}.db"
        if target.store == "mariadb":
            if self.maria is None:
                self.maria = MariaStore()
                await self.maria.open()
            dsn = await self.maria.fresh()  # the previous run's database dropped
            await migrate(config(self.tmp, f"{name}-migrate", self.app.url, dsn, target.tree),
                          target.tree)
            return dsn
        if self.pg is None:
            self.pg = PgStore(os.environ.get("SIDECAR_BENCH_PG_DSN",
                                             "postgresql://postgres@127.0.0.1:5432/postgres"))
            await self.pg.open()
        await self.pg.create(name)
        dsn = self.pg.dsn(name)
        await migrate(config(self.tmp, f"{name}-migrate", self.app.url, dsn, target.tree),
                      target.tree)
        return dsn

    async def start(self, target: Target, marked: bool, lone: bool) -> Started:
        """The proxy under callgrind, listening."""
        self.serial += 1
        name = f"{target.server}-{self.serial}"
        out = self.tmp / f"{name}.callgrind"
        cuts = self.tmp / f"{name}.cuts.json"
        arm = self.tmp / f"{name}.arm"
        database = f"bench_instr_{os.getpid()}_{self.serial}"
        env = {"PYTHONUNBUFFERED": "1", "WEBHOOK_SIDECAR_LOOP": target.loop,
               "PHASE_MARKS_ARM": str(arm),
               "PHASE_MARKS_REQUESTS": str(self.args.requests), "PHASE_MARKS_OUT": str(cuts),
               "PHASE_MARKS_PLAIN": "0" if marked else "1"}
        if target.server == "sidecar":
            store = await self.store_url(target, database)
            args = ["run", "--config",
                    str(config(self.tmp, name, self.app.url, store, target.tree))]
            if lone:  # the background refresh stretched, plain or marked (phase_marks.py)
                launch = [str(MARKER), target.loop, "sidecar", *args]
            else:
                launch = [*(["-c", UVLOOP] if target.loop == "uvloop" else ["-m", "sidecar"]),
                          *args]
            cwd = target.tree
        else:
            args = ["--upstream", self.app.url]
            launch = ([str(MARKER), target.loop, "passthrough", *args] if lone else
                      ["-m", "bench.passthrough", *args, "--loop", target.loop])
            cwd = REPO
        env["PYTHONPATH"] = str(cwd)
        argv = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                f"--callgrind-out-file={out}", *(CUT_OPTIONS if lone else []),
                sys.executable, *launch]
        proc = await self.procs.start(name, argv, self.tmp / f"{name}.log", env=env, cwd=cwd)
        url = "http://" + await wait_listening(proc, timeout=300)
        return Started(proc, url, out, cuts, arm,
                       database if target.store == "postgres" else None)

    async def measure(self, target: Target, *, lone: bool, marked: bool = False) -> Measured:
        """Ir per request (and CPU µs under valgrind) of one proxy run; ``lone``: one
        connection; ``marked``: cut by phase (bench/phase_marks.py)."""
        args = self.args
        connections = 1 if lone else args.connections
        replay = target.kind == "dups" and target.server == "sidecar"
        started = await self.start(target, marked, lone)
        proc, url, out, cuts = started.proc, started.url, started.out, started.cuts
        try:
            ids = new_ids(args.ids)
            await send_all(url, ids, len(ids), connections, replay=False)  # forwarded once
            if target.kind == "dups":
                await send_all(url, ids, len(ids), connections, replay=replay)  # warm-up
                counted = ids
            else:
                await send_all(url, new_ids(args.ids), args.ids, connections, replay=False)
                counted = new_ids(args.requests + 1)
            await control("-i", "on", str(proc.pid))
            before = cpu_us(proc.pid)
            if lone:
                # Plain or marked, the same window: from arming (the heap frozen) to request
                # N + 1's first byte, i.e. N whole requests.
                started.arm.touch()
                await send_all(url, counted, args.requests + 1, 1, replay=replay)
                await wait_for_file(cuts, proc)
            else:
                await send_all(url, counted, args.requests, connections, replay=replay)
            spent = cpu_us(proc.pid) - before
            await control("-i", "off", str(proc.pid))
        finally:
            await self.procs.stop(proc, timeout=120)
            if self.pg is not None and started.database is not None:
                await self.pg.drop(started.database)
        requests = args.requests
        parts = await asyncio.to_thread(callgrind_parts, str(out))
        if not lone:
            if len(parts) != 1:
                raise BenchError(f"{len(parts)} totals in {out}, expected 1")
            return Measured(parts[0] / requests, spent / requests)
        seen = json.loads(cuts.read_text())
        events: list[str] = seen["events"]
        if len(parts) != len(events) + 1:
            raise BenchError(f"{len(parts)} cuts in {out} for {len(events)} boundaries: "
                             "something else calls getsid?")
        if args.keep is not None:  # for callgrind_annotate
            await asyncio.to_thread(shutil.copy, out, args.keep / out.name)
            await asyncio.to_thread(shutil.copy, cuts, args.keep / cuts.name)
        await asyncio.to_thread(out.unlink)
        if not marked:  # arm, then the last request's first byte
            return Measured(parts[1] / requests, spent / requests, hooks=seen["hooks"],
                            loop=seen["loop"])
        by_phase = attribute(events, parts[:len(events)])
        return Measured(0.0, spent / requests,
                        {name: value / requests for name, value in by_phase.items()},
                        sum(by_phase.values()) / requests, seen["hooks"], seen["loop"])


async def wait_for_file(path: Path, proc: Proc, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(path.exists):
        if proc.proc.returncode is not None or time.monotonic() > deadline:
            raise BenchError(f"{proc.name} wrote no {path.name}:\n{proc.tail()}")
        await asyncio.sleep(0.1)


async def migrate(config_path: Path, tree: Path) -> None:
    """The tree's own ``sidecar migrate`` (its schema, whatever this checkout's is)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "sidecar", "migrate", "--config", str(config_path),
        cwd=str(tree), env={**os.environ, "PYTHONPATH": str(tree)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    if proc.returncode != 0:
        raise BenchError(f"sidecar migrate in {tree} failed:\n{out.decode(errors='replace')}")


def targets(args: argparse.Namespace) -> list[tuple[Target, Target]]:
    """(webhook-sidecar, the pass-through it is compared with), in the order they run."""
    pairs = []
    for loop in args.loops:
        for kind in args.kinds:
            store = args.dups_store if kind == "dups" else args.new_store
            for tree in args.trees:
                pairs.append((Target("sidecar", tree, loop, kind, store),
                              Target("passthrough", REPO, loop, kind, "")))
    return pairs


def key(target: Target) -> tuple[str, str, str]:
    return (target.label, target.kind, target.store)


def in_order(args: argparse.Namespace) -> Iterator[tuple[int, Target]]:
    """``--runs`` times every target pair: each tree's proxy, and the pass-through once per
    loop, kind and run."""
    for run in range(1, args.runs + 1):
        measured_through: set[tuple[str, str]] = set()
        for sidecar, through in targets(args):
            yield run, sidecar
            if (through.loop, through.kind) not in measured_through:
                measured_through.add((through.loop, through.kind))
                yield run, through


async def count(bench: Bench) -> dict[tuple[str, str, str], list[Measured]]:
    """Every target's instructions per request, ``--runs`` times (:func:`in_order`)."""
    results: dict[tuple[str, str, str], list[Measured]] = {}
    for run, target in in_order(bench.args):
        got = await bench.measure(target, lone=False)
        results.setdefault(key(target), []).append(got)
        print(f"run {run}: {target.label}, {KIND_NAMES[target.kind]}: "
              f"{got.ir:,.0f} Ir/req ({got.cpu:,.0f} µs/req under valgrind)",
              flush=True)
    return results


def tree_names(trees: list[Path]) -> dict[Path, str]:
    """Each tree as the table shows it: its directory's name, or its whole path when two
    trees share a name."""
    names = [tree.name for tree in trees]
    return {tree: tree.name if names.count(tree.name) == 1 else str(tree) for tree in trees}


def show_counts(args: argparse.Namespace, results: dict[tuple[str, str, str], list[Measured]],
                app_kind: str) -> int:
    """The medians table — one row per tree, loop and kind, beside the pass-through on the
    same loop for the same requests — and the goals; 0, or 3 when a goal is missed."""
    print(f"\nmedians of {args.runs}: Ir per request, {args.requests} requests per proxy over "
          f"{args.connections} connections, GitHub deliveries, app: {app_kind}\n")
    print("| tree | loop | requests | store | Ir/req | pass-through Ir/req | × | goal | "
          "runs (Ir/req) |")
    print("|---|---|---|---|---:|---:|---:|---|---|")
    missed = 0
    names = tree_names(args.trees)
    for sidecar, through in targets(args):
        values = results[key(sidecar)]
        median = statistics.median(v.ir for v in values)
        base = statistics.median(v.ir for v in results[key(through)])
        ratio = median / base
        ok = ratio <= GOALS[sidecar.kind]
        missed += not ok
        print(f"| {names[sidecar.tree]} | {sidecar.loop} | {KIND_NAMES[sidecar.kind]} | "
              f"{sidecar.store} | {median:,.0f} | {base:,.0f} | {ratio:.2f} | "
              f"≤ {GOALS[sidecar.kind]}× {'met' if ok else 'MISSED'} | "
              + ", ".join(f"{v.ir:,.0f}" for v in values) + " |")
    print()
    for tree, name in names.items():
        if name != str(tree):
            print(f"{name}: {tree}")
    return 3 if missed else 0


async def by_phase(bench: Bench) -> dict[tuple[str, str, str], list[Measured]]:
    """``--runs`` times every target: plain, then cut by phase; lone deliveries."""
    results: dict[tuple[str, str, str], list[Measured]] = {}
    for run, target in in_order(bench.args):
        plain = await bench.measure(target, lone=True)
        got = await bench.measure(target, lone=True, marked=True)
        got.ir = plain.ir
        results.setdefault(key(target), []).append(got)
        print(f"run {run}: {target.label}, lone {KIND_NAMES[target.kind]}: "
              f"{plain.ir:,.0f} Ir/req plain, {got.marked_ir:,.0f} marked "
              f"({got.marked_ir / plain.ir - 1:+.1%}); loop {got.loop}; "
              + ", ".join(f"{k} {v:,.0f}" for k, v in got.phases.items()), flush=True)
    return results


SCALE_ABOVE = 0.05  # markers' cost beyond which the phases are also shown scaled


def show_phases(args: argparse.Namespace,
                results: dict[tuple[str, str, str], list[Measured]]) -> None:
    print(f"\nmedians of {args.runs}: Ir per lone delivery by phase, {args.requests} requests "
          "one at a time on one connection, GitHub deliveries\n")
    columns = []
    for sidecar, through in targets(args):
        for target in ([through] if sidecar.tree == args.trees[0] else []) + [sidecar]:
            columns.append(target)
    names = [n for n in PHASES if any(n in v.phases for c in columns for v in results[key(c)])]
    names += sorted({n for c in columns for v in results[key(c)] for n in v.phases} - set(names))
    trees = tree_names(args.trees)
    heads = [f"{'pass-through' if c.server == 'passthrough' else trees[c.tree]}, {c.loop}, "
             f"{c.kind}" for c in columns]

    def median(column: Target, pick: str, scaled: bool = False) -> float:
        values = results[key(column)]
        if pick == "ir":
            return statistics.median(v.ir for v in values)
        if pick == "marked":
            return statistics.median(v.marked_ir for v in values)
        # Scaled: each run's phases times its plain total over its marked one.
        return statistics.median(v.phases.get(pick, 0.0) * (v.ir / v.marked_ir if scaled else 1)
                                 for v in values)

    def cost(column: Target) -> float:
        return (median(column, "marked") - median(column, "background")) / median(column, "ir") - 1

    print("| phase (as counted in the marked run) | " + " | ".join(heads) + " |")
    print("|---|" + "---:|" * len(columns))
    for name in names:
        print(f"| {name} | " + " | ".join(f"{median(c, name):,.0f}" for c in columns) + " |")
    print("| **total, marked** | " + " | ".join(f"{median(c, 'marked'):,.0f}"
                                              for c in columns) + " |")
    print("| total, marked, without background | " + " | ".join(
        f"{median(c, 'marked') - median(c, 'background'):,.0f}" for c in columns) + " |")
    print("| total, plain (background included) | " + " | ".join(
        f"{median(c, 'ir'):,.0f}" for c in columns) + " |")
    print("| markers' cost (without background) | " + " | ".join(
        f"{cost(c):+.1%}" for c in columns) + " |")
    if any(abs(cost(c)) > SCALE_ABOVE for c in columns):
        print(f"\nThe marked runs differ from the plain ones by more than {SCALE_ABOVE:.0%}: the "
              "same phases, each run's scaled so they add up to its plain total\n")
        print("| phase (scaled to the plain total) | " + " | ".join(heads) + " |")
        print("|---|" + "---:|" * len(columns))
        for name in names:
            print(f"| {name} | " + " | ".join(f"{median(c, name, True):,.0f}"
                                              for c in columns) + " |")
        print("| total, plain | " + " | ".join(f"{median(c, 'ir'):,.0f}" for c in columns)
              + " |")
    print()
    for column in columns:
        hooks = results[key(column)][0].hooks
        print(f"{column.label}: boundaries {', '.join(hooks)}")


async def main_async(args: argparse.Namespace) -> int:
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise BenchError("valgrind is not installed: apt-get install valgrind", 2)
    if "uvloop" in args.loops:
        try:
            import uvloop  # noqa: F401
        except ImportError:
            raise BenchError("uvloop is not installed: .venv/bin/pip install uvloop", 2) from None
    with tempfile.TemporaryDirectory(prefix="bench-instr-") as tmp_name:
        bench = Bench(args, Path(tmp_name))
        try:
            await bench.app.start()
            if args.phases:
                show_phases(args, await by_phase(bench))
                return 0
            return show_counts(args, await count(bench), bench.app.kind)
        finally:
            await bench.procs.stop_all()
            if bench.pg is not None:
                with contextlib.suppress(Exception):
                    await bench.pg.close()
            if bench.maria is not None:
                await bench.maria.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.instructions",
                                     description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--tree", action="append", default=[],
                        help="a source tree to run the proxy from (repeat to compare)")
    parser.add_argument("--loop", default="asyncio", help="asyncio, uvloop or both: a,b")
    parser.add_argument("--kind", default="dups,new", help="dups, new or both: a,b")
    parser.add_argument("--dups-store", choices=["sqlite", "postgres", "mariadb"],
                        default="sqlite")
    parser.add_argument("--new-store", choices=["sqlite", "postgres", "mariadb"],
                        default="postgres")
    parser.add_argument("--phases", action="store_true",
                        help="lone deliveries, instructions by phase (plain and marked)")
    parser.add_argument("--requests", type=int, default=None,
                        help="counted per proxy (default 500; 100 with --phases)")
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--ids", type=int, default=100, help="warm-up events")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keep", type=Path, default=None, metavar="DIR",
                        help="--phases: copy each run's callgrind file and boundaries here")
    args = parser.parse_args(argv)
    args.trees = [Path(tree).resolve() for tree in args.tree] or [REPO]
    args.loops = args.loop.split(",")
    args.kinds = args.kind.split(",")
    if args.requests is None:
        args.requests = 100 if args.phases else 500
    if args.phases:
        args.ids = min(args.ids, 30)
    for kind in args.kinds:
        if kind not in GOALS:
            parser.error(f"--kind: {kind!r} is not dups or new")
    for loop in args.loops:
        if loop not in ("asyncio", "uvloop"):
            parser.error(f"--loop: {loop!r} is not asyncio or uvloop")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return asyncio.run(main_async(args))
    except BenchError as exc:
        print(f"bench.instructions: {exc}", file=sys.stderr)
        return exc.code


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    raise SystemExit(main())
