"""Speed of webhook-sidecar against its floors and a Node + Redis competitor, driven by wrk.

    .venv/bin/python -m bench.wrk [--store postgres|sqlite] [--duration 10] [--runs 1]
                                  [--phases passthrough,hello,…] [--seed-rows N] [--write-docs]

Every phase sends pre-signed GitHub deliveries (bench/wrk/deliveries.lua) from one wrk thread
over 32 keep-alive connections for a fixed time after a warm-up, on loopback:

  passthrough      a bare aiohttp pass-through proxy (bench/passthrough.py): the Python floor
  hello            an aiohttp "hello world" (bench/hello.py): aiohttp's server alone
  competitor       Node 20 + Redis (bench/competitor): verify, SET NX, forward; new events
  competitor-dups  the same, duplicates of events it delivered first
  dups-known       webhook-sidecar: duplicates of done events this process delivered first
  dups-unknown     webhook-sidecar: duplicates of done events another process delivered first
  new              webhook-sidecar: every request a new event
  burst            webhook-sidecar: 50 copies of each new event at once (50 connections)
  queue            webhook-sidecar, queue mode: every request a new event, answered once
                   stored; the phase ends when the app has received every accepted one

Each webhook-sidecar phase gets a fresh database (PostgreSQL: bench_wrk_<pid> on the server at
$SIDECAR_BENCH_PG_DSN, else 127.0.0.1:5432, created from a migrated template and CHECKPOINTed
before the measurement; SQLite: a new file). The app behind every proxy is nginx `return 200`
(or bench/app_fast.py when nginx is not installed); it logs each delivery id it receives, which
is how the checks count forwards. Per phase: req/s, p50/p99 latency, the proxy's CPU per
request (utime + stime from /proc), PostgreSQL's CPU per request (its processes from /proc,
other databases' sessions excluded) or Redis's for the competitor, and commits per request
(pg_stat_database). Bounded in time; stops every process it started, drops its databases.
Not part of the test suite. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import datetime
import hashlib
import hmac
import json
import math
import os
import platform
import re
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import asyncpg
import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
LUA = HERE / "wrk" / "deliveries.lua"
COMPETITOR = HERE / "competitor"
DOCS = REPO / "docs" / "benchmarks.md"
BEGIN = "<!-- bench.wrk results: begin -->"
END = "<!-- bench.wrk results: end -->"

SECRET = "bench-wrk-github-secret"
PATH = "/webhooks/github"
EVENT = "push"
CLK_TCK = os.sysconf("SC_CLK_TCK")


class BenchError(Exception):
    """A failure that ends the benchmark with a message (exit 1), or 2 for a missing tool."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Phase:
    name: str
    title: str
    server: str  # passthrough | hello | competitor | sidecar
    workload: str  # new | dup | burst
    prime: str = ""  # "same": delivered first by the measured process; "other": by another
    # Paced at half the median req/s this phase reached earlier in the runs (wrk's delay()
    # hook between a connection's requests), for the latency added at half load.
    half_of: str = ""
    queue: bool = False  # the provider in queue mode: answered once stored, delivered after


PHASES = {p.name: p for p in [
    Phase("passthrough", "pass-through (bare aiohttp proxy)", "passthrough", "new"),
    Phase("hello", "aiohttp hello world (no upstream)", "hello", "new"),
    Phase("competitor", "Node + Redis: new events", "competitor", "new"),
    Phase("competitor-dups", "Node + Redis: duplicates", "competitor", "dup", "same"),
    Phase("dups-known", "sidecar: duplicates known to the process", "sidecar", "dup", "same"),
    Phase("dups-unknown", "sidecar: duplicates from another process", "sidecar", "dup",
          "other"),
    Phase("new", "sidecar: new events", "sidecar", "new"),
    Phase("burst", "sidecar: bursts of 50 copies", "sidecar", "burst"),
    Phase("half-passthrough", "pass-through at half the sidecar's new-event maximum",
          "passthrough", "new", half_of="new"),
    Phase("half-new", "sidecar: new events at half its maximum", "sidecar", "new",
          half_of="new"),
    Phase("queue", "sidecar, queue mode: new events (accepted, then delivered)", "sidecar",
          "new", queue=True),
]}
OPTIONAL = {"competitor", "competitor-dups"}


# ---------------------------------------------------------------------------------------------
# Processes: each started in its own session (Ctrl-C reaches only this harness, which stops them
# in order) and with a parent-death signal (they die with the harness even if it is killed).

def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class Proc:
    name: str
    proc: asyncio.subprocess.Process
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def tail(self, lines: int = 15) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])


class Procs:
    def __init__(self) -> None:
        self.running: list[Proc] = []

    async def start(self, name: str, argv: Sequence[str], log: Path,
                    env: dict[str, str] | None = None, cwd: Path = REPO) -> Proc:
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                cwd=str(cwd), env={**os.environ, **(env or {})}, start_new_session=True,
                preexec_fn=_die_with_parent)
        finally:
            os.close(out)
        started = Proc(name, proc, log)
        self.running.append(started)
        return started

    async def stop(self, proc: Proc, sig: signal.Signals = signal.SIGTERM,
                   timeout: float = 10.0) -> None:
        if proc.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.proc.send_signal(sig)
            try:
                await asyncio.wait_for(proc.proc.wait(), timeout)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.proc.kill()
                await proc.proc.wait()
        if proc in self.running:
            self.running.remove(proc)

    async def stop_all(self) -> None:
        for proc in reversed(list(self.running)):
            await self.stop(proc, timeout=5.0)


async def wait_listening(proc: Proc, timeout: float = 30.0) -> str:
    """The ``listen`` address of the first JSON ``listening`` line the process logs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.proc.returncode is not None:
            raise BenchError(f"{proc.name} exited ({proc.proc.returncode}):\n{proc.tail()}")
        with contextlib.suppress(OSError):
            for line in proc.log.read_text(errors="replace").splitlines():
                if '"listening"' not in line:
                    continue
                with contextlib.suppress(ValueError):
                    entry = json.loads(line)
                    if entry.get("event") == "listening":
                        return str(entry["listen"])
        await asyncio.sleep(0.05)
    raise BenchError(f"{proc.name} did not start within {timeout:.0f}s:\n{proc.tail()}")


async def wait_port(port: int, proc: Proc, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.proc.returncode is not None:
            raise BenchError(f"{proc.name} exited ({proc.proc.returncode}):\n{proc.tail()}")
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.05)
            continue
        writer.close()
        await writer.wait_closed()
        return
    raise BenchError(f"{proc.name} did not listen on {port} within {timeout:.0f}s")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_us(pid: int) -> float:
    """utime + stime of a process (all its threads), in µs; 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except OSError:
        return 0.0
    # After the command's ")": state is field 3, utime 14 and stime 15 (1-based, proc(5)).
    return (int(fields[11]) + int(fields[12])) * 1e6 / CLK_TCK


def parent(pid: int) -> int:
    """The parent's pid (0 if the process is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return int(handle.read().rsplit(b")", 1)[1].split()[1])
    except OSError:
        return 0


def children(ppid: int) -> list[int]:
    return [int(entry) for entry in os.listdir("/proc")
            if entry.isdigit() and parent(int(entry)) == ppid]


def version_of(argv: list[str]) -> str:
    """The first line a ``--version``-like command prints (on stdout or stderr)."""
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=30)
    return (done.stdout.strip() or done.stderr.strip()).split("\n")[0]


# ---------------------------------------------------------------------------------------------
# Deliveries: GitHub push-like bodies, unique per delivery id, signed as GitHub does.

BODY_PREFIX = json.dumps({
    "ref": "refs/heads/main", "before": "6113728f27ae82c7b1a177c8d03f9e96e0adf246",
    "repository": {"id": 186853002, "node_id": "MDEwOlJlcG9zaXRvcnkxODY4NTMwMDI=",
                   "name": "Hello-World", "full_name": "Codertocat/Hello-World",
                   "private": False, "html_url": "https://github.com/Codertocat/Hello-World",
                   "default_branch": "main"},
    "pusher": {"name": "Codertocat", "email": "21031067+Codertocat@users.noreply.github.com"},
    "sender": {"login": "Codertocat", "id": 21031067, "type": "User",
               "avatar_url": "https://avatars1.githubusercontent.com/u/21031067?v=4"},
    "created": False, "deleted": False, "forced": False, "compare":
        "https://github.com/Codertocat/Hello-World/compare/6113728f27ae...000000000000",
    "commits": [{"message": "Update README.md", "timestamp": "2019-05-15T15:20:41Z",
                 "author": {"name": "Codertocat", "username": "Codertocat"},
                 "added": [], "removed": [], "modified": ["README.md"]}],
}, separators=(",", ":"))[:-1] + ',"head_commit":{"id":"'
BODY_SUFFIX = '","message":"Update README.md","distinct":true}}'


def body_of(delivery_id: str) -> bytes:
    return (BODY_PREFIX + delivery_id + BODY_SUFFIX).encode()


def signature_of(body: bytes) -> str:
    return hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()


def new_ids(count: int) -> list[str]:
    return [str(uuid.uuid4()) for _ in range(count)]


def write_deliveries(path: Path, ids: Iterable[str]) -> Path:
    with open(path, "w") as out:
        out.write(f"{PATH}\n{EVENT}\n{BODY_PREFIX}\n{BODY_SUFFIX}\n")
        for delivery_id in ids:
            out.write(f"{delivery_id} {signature_of(body_of(delivery_id))}\n")
    return path


def headers_of(delivery_id: str, body: bytes) -> dict[str, str]:
    return {"Content-Type": "application/json", "User-Agent": "GitHub-Hookshot/bench",
            "X-GitHub-Event": EVENT, "X-GitHub-Delivery": delivery_id,
            "X-Hub-Signature-256": "sha256=" + signature_of(body)}


async def prime(url: str, ids: Sequence[str], concurrency: int = 32) -> None:
    """Deliver each id once, 2xx expected (the first delivery, which the duplicates repeat)."""
    queue = list(ids)
    failures: list[str] = []

    async def worker(client: aiohttp.ClientSession) -> None:
        while queue:
            delivery_id = queue.pop()
            body = body_of(delivery_id)
            async with client.post(url + PATH, data=body,
                                   headers=headers_of(delivery_id, body)) as resp:
                await resp.read()
                if resp.status // 100 != 2:
                    failures.append(f"{delivery_id}: {resp.status}")

    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(
            timeout=timeout, connector=aiohttp.TCPConnector(limit=concurrency)) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
    if failures:
        raise BenchError(f"priming {len(failures)} deliveries failed: {failures[:3]}")


# ---------------------------------------------------------------------------------------------
# wrk

@dataclass
class WrkResult:
    requests: int
    seconds: float
    errors: dict[str, int]
    p50_ms: float
    p99_ms: float
    calls: int
    wrapped: int
    text: str

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}


def parse_latency_distribution(text: str) -> dict[float, float]:
    """wrk --latency's "Latency Distribution" block: percentile -> ms."""
    found: dict[float, float] = {}
    for match in re.finditer(r"^\s+(\d+(?:\.\d+)?)%\s+(\d+(?:\.\d+)?)(us|ms|s|m)\s*$", text,
                             re.MULTILINE):
        found[float(match[1])] = float(match[2]) * _UNITS[match[3]]
    return found


def parse_wrk(text: str) -> WrkResult:
    line = next((x for x in text.splitlines() if x.startswith("WRKJSON ")), None)
    if line is None:
        raise BenchError(f"wrk printed no WRKJSON line:\n{text[-2000:]}")
    data = json.loads(line.removeprefix("WRKJSON "))
    distribution = parse_latency_distribution(text)
    # The Lua summary has the exact percentiles; the --latency table (2 significant decimals)
    # is the fallback if a wrk build's done() lacks them.
    p50 = data["p50_us"] / 1000 if data.get("p50_us") else distribution.get(50.0, math.nan)
    p99 = data["p99_us"] / 1000 if data.get("p99_us") else distribution.get(99.0, math.nan)
    errors = {k: int(data[k]) for k in ("connect", "read", "write", "status", "timeout")}
    return WrkResult(int(data["requests"]), data["duration_us"] / 1e6, errors, p50, p99,
                     int(data["calls"]), int(data["wrapped"]), text)


async def run_wrk(url: str, deliveries: Path, mode: str, seconds: float, connections: int,
                  threads: int, burst: int, pause_ms: float = 0.0) -> WrkResult:
    """``pause_ms``: each connection waits this long after an answer before its next request
    (paced load; 0: as fast as answers come)."""
    argv = ["wrk", f"-t{threads}", f"-c{max(connections, threads)}", f"-d{seconds:g}s",
            "--latency", "--timeout", "15s", "-s", str(LUA), url + PATH, "--",
            str(deliveries), mode, str(burst), str(threads), f"{pause_ms:.3f}"]
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        preexec_fn=_die_with_parent)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), seconds + 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    text = out.decode(errors="replace")
    if proc.returncode != 0:
        raise BenchError(f"wrk failed ({proc.returncode}):\n{text[-2000:]}")
    return parse_wrk(text)


# ---------------------------------------------------------------------------------------------
# The app: nginx `return 200` logging each X-GitHub-Delivery, else bench/app_fast.py.

class App:
    def __init__(self, procs: Procs, tmp: Path, loop: str) -> None:
        self.procs, self.tmp, self.loop = procs, tmp, loop
        self.ids_log = tmp / "app-ids.log"
        self.kind = ""
        self.url = ""

    async def start(self) -> None:
        self.ids_log.touch()
        nginx = shutil.which("nginx") or next(
            (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.access(p, os.X_OK)),
            None)
        if nginx:
            port = free_port()
            conf = self.tmp / "nginx.conf"
            user = "user root root;\n" if os.geteuid() == 0 else ""
            temp = "".join(f"  {kind}_temp_path {self.tmp}/nginx-{kind};\n"
                           for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
            conf.write_text(
                f"{user}daemon off;\nmaster_process on;\nworker_processes 1;\n"
                f"pid {self.tmp}/nginx.pid;\nerror_log {self.tmp}/nginx-error.log warn;\n"
                "events { worker_connections 4096; }\n"
                "http {\n  access_log off;\n" + temp +
                "  log_format ids '$http_x_github_delivery';\n"
                "  keepalive_requests 10000000;\n  keepalive_timeout 75s;\n"
                "  default_type text/plain;\n"
                f"  server {{\n    listen 127.0.0.1:{port} backlog=1024;\n"
                f"    access_log {self.ids_log} ids;\n"
                "    location / { return 200 'ok\\n'; }\n  }\n}\n")
            version = version_of([nginx, "-v"]).split("/")[-1]
            proc = await self.procs.start(
                "nginx", [nginx, "-p", str(self.tmp), "-c", str(conf),
                          "-e", str(self.tmp / "nginx-error.log")], self.tmp / "nginx.log")
            await wait_port(port, proc)
            self.kind = f"nginx {version} (return 200)"
            self.url = f"http://127.0.0.1:{port}"
        else:
            proc = await self.procs.start(
                "app_fast", [sys.executable, "-m", "bench.app_fast", "--log", str(self.ids_log),
                             "--loop", self.loop], self.tmp / "app_fast.log")
            self.url = "http://" + await wait_listening(proc)
            self.kind = "bench/app_fast.py (nginx not installed)"

    def mark(self) -> int:
        return self.ids_log.stat().st_size

    def since(self, mark: int) -> list[str]:
        with open(self.ids_log, "rb") as handle:
            handle.seek(mark)
            return handle.read().decode(errors="replace").splitlines()

    def complete_lines(self, mark: int) -> tuple[list[str], int]:
        """The whole lines written since ``mark``, and the offset just past the last of them
        (a line still being written is left for the next read, judged on the bytes read)."""
        with open(self.ids_log, "rb") as handle:
            handle.seek(mark)
            data = handle.read()
        end = data.rfind(b"\n") + 1
        return data[:end].decode(errors="replace").splitlines(), mark + end


# ---------------------------------------------------------------------------------------------
# Stores

class PgStore:
    """A migrated template database and, per phase, a fresh copy of it; only these two are
    ever created, read or dropped (plus read-only looks at pg_stat_* and /proc)."""

    def __init__(self, admin_dsn: str) -> None:
        self.admin_dsn = admin_dsn
        self.name = f"bench_wrk_{os.getpid()}"
        self.template = f"{self.name}_tpl"
        self.conn: Any = None
        self.postmaster = 0
        self.version = ""
        self.created: set[str] = set()

    def dsn(self, name: str) -> str:
        return urlunsplit(urlsplit(self.admin_dsn)._replace(path=f"/{name}"))

    async def open(self) -> None:
        try:
            self.conn = await asyncpg.connect(self.admin_dsn, timeout=5)
        except (OSError, asyncpg.PostgresError) as exc:
            raise BenchError(f"PostgreSQL at {self.admin_dsn} is not reachable ({exc}): set "
                             "$SIDECAR_BENCH_PG_DSN or use --store sqlite", 2) from None
        self.version = await self.conn.fetchval("SHOW server_version")
        backend = await self.conn.fetchval("SELECT pg_backend_pid()")
        self.postmaster = parent(backend)

    async def create(self, name: str, template: str | None = None) -> None:
        await self.drop(name)
        self.created.add(name)
        if template is None:
            await self.conn.execute(f'CREATE DATABASE "{name}"')
        else:
            await self.conn.execute(
                f'CREATE DATABASE "{name}" TEMPLATE "{template}" STRATEGY FILE_COPY')

    async def drop(self, name: str) -> None:
        await self.conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self.created.discard(name)

    async def fresh(self) -> str:
        await self.create(self.name, self.template)
        return self.dsn(self.name)

    async def checkpoint(self) -> None:
        await self.conn.execute("CHECKPOINT")

    async def commits(self) -> int:
        value = await self.conn.fetchval(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = $1", self.name)
        return int(value or 0)

    async def wait_idle(self, timeout: float = 15.0) -> None:
        """Until no session is left on the phase's database (its stats are then flushed)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            left = await self.conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", self.name)
            if not left:
                return
            await asyncio.sleep(0.05)

    async def cpu(self) -> dict[int, float]:
        """CPU µs of the postmaster and its children, except sessions on other databases."""
        others = {row["pid"] for row in await self.conn.fetch(
            "SELECT pid FROM pg_stat_activity WHERE datname IS NOT NULL AND datname <> $1",
            self.name)}
        pids = [self.postmaster, *children(self.postmaster)]
        return {pid: cpu_us(pid) for pid in pids if pid not in others}

    async def close(self) -> None:
        if self.conn is None:
            return
        for name in list(self.created):
            with contextlib.suppress(Exception):
                await self.drop(name)
        await self.conn.close()


def cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    return sum(value - before.get(pid, 0.0) for pid, value in after.items())


async def migrate(config: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "sidecar", "migrate", "--config", str(config), cwd=str(REPO),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    if proc.returncode != 0:
        raise BenchError(f"webhook-sidecar migrate failed:\n{out.decode(errors='replace')}")


def clone_select(columns: list[str], dialect: str) -> tuple[str, str]:
    """Column list and SELECT expressions cloning the template row ``t`` for each ``g``:
    a unique, uuid-like event id, and receive/update times spread over the past."""
    exprs = []
    for col in columns:
        if col == "event_id":
            exprs.append("md5(g::text)::uuid::text" if dialect == "postgres" else
                         "printf('%08x-seed-%012d', (g.n * 2654435761) % 4294967296, g.n)")
        elif col in ("received_at", "updated_at"):
            exprs.append(f"t.{col} - g * interval '50 milliseconds'" if dialect == "postgres"
                         else f"t.{col} - g.n * 0.05")
        else:
            exprs.append(f"t.{col}")
    return ", ".join(columns), ", ".join(exprs)


async def seed_postgres(dsn: str, template_id: str, rows: int) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        columns = [r["column_name"] for r in await conn.fetch(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_name = 'webhook_event' ORDER BY ordinal_position")]
        names, exprs = clone_select(columns, "postgres")
        order = columns.index("event_id") + 1
        await conn.execute("SET synchronous_commit = off; SET maintenance_work_mem = '256MB'")
        await conn.execute(
            f"INSERT INTO webhook_event ({names}) SELECT {exprs} FROM webhook_event t "
            f"CROSS JOIN generate_series(1, $1::bigint) g WHERE t.event_id = $2 "
            f"ORDER BY {order}", rows, template_id, timeout=None)
        await conn.execute("VACUUM (FREEZE, ANALYZE) webhook_event", timeout=None)
        count, size = await conn.fetchrow(
            "SELECT count(*), pg_size_pretty(pg_total_relation_size('webhook_event')) "
            "FROM webhook_event")
        print(f"template: {count} rows, {size} with indexes", file=sys.stderr, flush=True)
    finally:
        await conn.close()


def seed_sqlite(path: Path, template_id: str, rows: int) -> None:
    con = sqlite3.connect(path)
    try:
        columns = [r[1] for r in con.execute("PRAGMA table_info(webhook_event)")]
        names, exprs = clone_select(columns, "sqlite")
        con.execute("PRAGMA synchronous = OFF")
        con.execute(
            "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ?) "
            f"INSERT INTO webhook_event ({names}) SELECT {exprs} FROM webhook_event t, g "
            "WHERE t.event_id = ? ORDER BY 2", (rows, template_id))
        con.commit()
        con.execute("ANALYZE")
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        count = con.execute("SELECT count(*) FROM webhook_event").fetchone()[0]
        print(f"template: {count} rows, {path.stat().st_size / 2**20:.0f} MiB", file=sys.stderr,
              flush=True)
    finally:
        con.close()


# ---------------------------------------------------------------------------------------------
# The benchmark

@dataclass
class Context:
    args: argparse.Namespace
    tmp: Path
    procs: Procs
    app: App
    pg: PgStore | None = None
    sqlite_template: Path | None = None
    redis: Proc | None = None
    redis_url: str = ""
    run: int = 0
    serial: int = 0
    loop_name: str = ""
    results: dict[str, list[Result]] = field(default_factory=dict)

    def path(self, name: str) -> Path:
        self.serial += 1
        return self.tmp / f"{self.serial:03d}-{name}"


def sidecar_config(ctx: Context, store_url: str, *, queue: bool = False) -> Path:
    provider: dict[str, Any] = {"path": PATH, "preset": "github", "secrets": [SECRET]}
    if queue:
        provider["mode"] = "queue"
    config = {
        "listen": "127.0.0.1:0", "admin_listen": "127.0.0.1:0", "shutdown_timeout": "2s",
        "upstream": {"url": ctx.app.url, "timeout": "5s"},
        "store": {"url": store_url, "pool_max_size": 10},
        "log": {"level": ctx.args.log_level, "format": "json"},
        "maintenance": {"interval": "1h"},
        "providers": {"github": provider},
    }
    path = ctx.path("sidecar.yaml")
    path.write_text(yaml.safe_dump(config))
    return path


# `python -m sidecar`, its event loop switched to uvloop's (--sidecar-loop uvloop): the
# shipped code runs asyncio.run(), which takes the loop from the policy.
UVLOOP_SIDECAR = ("import asyncio, sys, uvloop; "
                  "asyncio.set_event_loop_policy(uvloop.EventLoopPolicy()); "
                  "from sidecar.cli import main; raise SystemExit(main(sys.argv[1:]))")


async def start_sidecar(ctx: Context, config: Path, name: str = "sidecar") -> tuple[Proc, str]:
    launch = (["-c", UVLOOP_SIDECAR] if ctx.args.sidecar_loop == "uvloop"
              else ["-m", "sidecar"])
    proc = await ctx.procs.start(
        name, [sys.executable, *launch, "run", "--config", str(config)],
        ctx.path(f"{name}.log"), env={"PYTHONUNBUFFERED": "1"})
    return proc, "http://" + await wait_listening(proc)


async def prepare_stores(ctx: Context) -> None:
    """The PostgreSQL template (migrated, seeded) or the seeded SQLite template file."""
    rows = ctx.args.seed_rows
    if ctx.pg is not None:
        await ctx.pg.create(ctx.pg.template)
        config = sidecar_config(ctx, ctx.pg.dsn(ctx.pg.template))
        await migrate(config)
        store_url = ctx.pg.dsn(ctx.pg.template)
    else:
        if not rows:
            return
        ctx.sqlite_template = ctx.tmp / "template.db"
        store_url = f"sqlite:///{ctx.sqlite_template}"
        config = sidecar_config(ctx, store_url)
    if not rows:
        return
    print(f"seeding {rows} done rows into the template…", file=sys.stderr, flush=True)
    started = time.monotonic()
    proc, url = await start_sidecar(ctx, config, "sidecar-seed")
    template_id = new_ids(1)[0]
    await prime(url, [template_id], 1)
    await ctx.procs.stop(proc)
    if ctx.pg is not None:
        await seed_postgres(store_url, template_id, rows)
    else:
        assert ctx.sqlite_template is not None
        await asyncio.to_thread(seed_sqlite, ctx.sqlite_template, template_id, rows)
    print(f"seeded in {time.monotonic() - started:.0f}s", file=sys.stderr, flush=True)


async def fresh_store(ctx: Context) -> str:
    if ctx.pg is not None:
        return await ctx.pg.fresh()
    path = ctx.path("store.db")
    if ctx.sqlite_template is not None:
        shutil.copyfile(ctx.sqlite_template, path)
    return f"sqlite:///{path}"


async def ensure_competitor(ctx: Context) -> None:
    if not (COMPETITOR / "node_modules" / ".package-lock.json").exists() or (
            (COMPETITOR / "package-lock.json").stat().st_mtime
            > (COMPETITOR / "node_modules" / ".package-lock.json").stat().st_mtime):
        print("npm ci in bench/competitor…", file=sys.stderr, flush=True)
        proc = await asyncio.create_subprocess_exec(
            "npm", "ci", "--no-audit", "--no-fund", cwd=str(COMPETITOR),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        out, _ = await asyncio.wait_for(proc.communicate(), 300)
        if proc.returncode != 0:
            raise BenchError(f"npm ci failed:\n{out.decode(errors='replace')[-2000:]}")
    if ctx.redis is None:
        port = free_port()
        ctx.redis = await ctx.procs.start(
            "redis-server", ["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                             "--save", "", "--appendonly", "no", "--dir", str(ctx.tmp),
                             "--databases", "1"], ctx.tmp / "redis.log")
        await wait_port(port, ctx.redis)
        ctx.redis_url = f"redis://127.0.0.1:{port}/0"


async def redis_flush(url: str) -> None:
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    writer.write(b"*1\r\n$7\r\nFLUSHDB\r\n")
    await writer.drain()
    answer = await asyncio.wait_for(reader.readline(), 10)
    writer.close()
    await writer.wait_closed()
    if not answer.startswith(b"+OK"):
        raise BenchError(f"redis FLUSHDB answered {answer!r}")


async def start_server(ctx: Context, phase: Phase, store_url: str) -> tuple[Proc, str]:
    if phase.server == "sidecar":
        return await start_sidecar(ctx, sidecar_config(ctx, store_url, queue=phase.queue))
    if phase.server == "competitor":
        await redis_flush(ctx.redis_url)
        proc = await ctx.procs.start(
            "competitor", ["node", str(COMPETITOR / "server.mjs")], ctx.path("competitor.log"),
            env={"PORT": "0", "UPSTREAM": ctx.app.url, "REDIS_URL": ctx.redis_url,
                 "SECRET": SECRET}, cwd=COMPETITOR)
        return proc, "http://" + await wait_listening(proc)
    argv = [sys.executable, "-m", f"bench.{phase.server}", "--loop", ctx.args.loop]
    if phase.server == "passthrough":
        argv += ["--upstream", ctx.app.url]
    proc = await ctx.procs.start(phase.server, argv, ctx.path(f"{phase.server}.log"))
    return proc, "http://" + await wait_listening(proc)


@dataclass
class Result:
    phase: str
    rps: float
    p50_ms: float
    p99_ms: float
    proxy_us: float
    db_us: float | None
    commits: float | None
    requests: int
    forwards: int | None
    problems: list[str] = field(default_factory=list)


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
    pg = ctx.pg if phase.server == "sidecar" else None
    store_url = await fresh_store(ctx) if phase.server == "sidecar" else ""
    pause_ms = 0.0
    if phase.half_of:
        reached = median(r.rps for r in ctx.results.get(phase.half_of, []))
        if not reached:
            raise BenchError(f"{phase.name} needs the {phase.half_of} phase before it")
        # Closed-loop wrk: each connection answers then waits; at half load the answer time
        # is small beside the pause, so the rate is close to (and at most) half.
        pause_ms = connections * 1000.0 / (reached / 2)

    if phase.prime == "other":  # another proxy process delivers them first, then stops
        other, other_url = await start_sidecar(ctx, sidecar_config(ctx, store_url), "other")
        both = write_deliveries(ctx.path(f"{phase.name}-prime.deliveries"),
                                measured_ids + warm_ids)
        await prime_with_wrk(ctx, other_url, both, measured_ids + warm_ids)
        await ctx.procs.stop(other)
    server, url = await start_server(ctx, phase, store_url)
    commits0, db0 = 0, {}
    try:
        if phase.prime == "same":
            await prime(url, measured_ids)
        await run_wrk(url, warm, mode, args.warmup, connections, args.threads, args.burst)
        if pg is not None:
            await pg.checkpoint()
            await asyncio.sleep(args.settle)  # idle sessions flush their stats within 10 s
            commits0 = await pg.commits()
            db0 = await pg.cpu()
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
            await delivered(ctx, mark, wanted, result.requests)
        forwarded = [i for i in ctx.app.since(mark) if i in wanted]
    finally:
        await ctx.procs.stop(server)
        if not args.keep:  # up to 20 MB each
            for path in ctx.tmp.glob("*.deliveries"):
                path.unlink()
    commits: float | None = None
    if pg is not None:
        await pg.wait_idle()
        commits = (await pg.commits() - commits0) / max(result.requests, 1)
    (ctx.path(f"{phase.name}.wrk.txt")).write_text(result.text)
    out = Result(phase.name, result.rps, result.p50_ms, result.p99_ms,
                 (proxy1 - proxy0) / max(result.requests, 1),
                 None if db_us is None else db_us / max(result.requests, 1), commits,
                 result.requests, None if phase.server == "hello" else len(forwarded))
    out.problems = check(phase, result, forwarded, per)
    return out


async def delivered(ctx: Context, mark: int, wanted: set[str], count: int,
                    timeout: float = 300.0) -> None:
    """Until the app has received ``count`` of the ``wanted`` ids (queue mode's deliveries,
    which go on after the answers), or ``timeout``: the check then says what is missing."""
    seen: set[str] = set()
    offset = mark
    deadline = time.monotonic() + timeout
    while len(seen) < count and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        lines, offset = ctx.app.complete_lines(offset)
        seen.update(i for i in lines if i in wanted)


async def prime_with_wrk(ctx: Context, url: str, deliveries: Path, ids: Sequence[str],
                         timeout: float = 900.0) -> None:
    """Deliver every id once, fast: wrk runs over the file (past its end it repeats ids,
    harmless duplicates) until the app has received them all, then is interrupted."""
    mark = ctx.app.mark()
    wanted = set(ids)
    argv = ["wrk", "-t1", f"-c{ctx.args.connections}", f"-d{timeout:g}s", "--timeout", "15s",
            "-s", str(LUA), url + PATH, "--", str(deliveries), "new", "1", "1"]
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        preexec_fn=_die_with_parent)
    seen: set[str] = set()
    offset = mark
    deadline = time.monotonic() + timeout
    try:
        while len(seen) < len(wanted):
            if proc.returncode is not None or time.monotonic() > deadline:
                raise BenchError(f"priming stopped with {len(seen)} of {len(wanted)} "
                                 "deliveries forwarded")
            await asyncio.sleep(0.2)
            lines, offset = ctx.app.complete_lines(offset)
            seen.update(i for i in lines if i in wanted)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()


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
    if distinct != len(forwarded):
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


async def start_py_spy(ctx: Context, phase: Phase, server: Proc) -> Proc | None:
    if ctx.args.py_spy is None or phase.server not in ("sidecar", "passthrough", "hello"):
        return None
    target = Path(ctx.args.py_spy) / f"{phase.name}-run{ctx.run + 1}.folded"
    return await ctx.procs.start(
        "py-spy", ["py-spy", "record", "--pid", str(server.pid), "--rate", "250",
                   "--duration", str(math.ceil(ctx.args.duration)), "--output", str(target),
                   "--format", "raw", "--nonblocking"], ctx.path("py-spy.log"))


def profile_summary(folded: Path, top: int = 15) -> str:
    """py-spy's collapsed stacks in two views, as shares of all samples: where the samples
    were (self time, by package; a socket send on loopback includes the receiver's kernel work)
    and which of webhook-sidecar's own functions they were under (inclusive; coroutine stacks
    start at the coroutine, so the event loop's frames do not enclose them all)."""
    own: dict[str, int] = {}
    under: dict[str, int] = {}
    total = 0
    for line in folded.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        samples = int(count)
        total += samples
        frames = stack.split(";")
        match = re.search(r"\(([^)]*)\)$", frames[-1])
        path = match[1] if match else ""
        if re.search(r"selector_events\.py:\d+\)$", frames[-1]) and ".write " in frames[-1]:
            where = "socket send (system call)"
        elif path.startswith("selectors.py"):
            where = "waiting in epoll"
        else:
            where = path.split("/")[0] if "/" in path else (path.split(":")[0] or "?")
        own[where] = own.get(where, 0) + samples
        for frame in {f for f in frames if "(sidecar/" in f}:
            under[frame] = under.get(frame, 0) + samples
    if not total:
        return f"{folded}: no samples"
    lines = [f"{folded}: {total} samples; self time by package:"]
    lines += [f"  {n / total:6.1%}  {name}"
              for name, n in sorted(own.items(), key=lambda x: -x[1])[:top]]
    lines.append("under webhook-sidecar's functions (inclusive):")
    ranked = sorted(((n, f) for f, n in under.items()
                     if not re.search(r"\((sidecar/__main__|sidecar/cli)\.py", f)),
                    key=lambda x: -x[0])
    lines += [f"  {n / total:6.1%}  {frame}" for n, frame in ranked[:top]]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Report

def median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(present) if present else None


def fmt(value: float | None, digits: int = 0, suffix: str = "") -> str:
    if value is None:
        return "—"
    return f"{value:,.{digits}f}{suffix}"


def table(results: dict[str, list[Result]], store: str) -> str:
    base = results.get("passthrough")
    base_rps = median(r.rps for r in base) if base else None
    base_us = median(r.proxy_us for r in base) if base else None
    db = "PostgreSQL" if store == "postgres" else "SQLite (in the proxy)"
    lines = [
        "| phase | req/s | × pass-through | p50 ms | p99 ms | proxy CPU µs/req "
        "| × pass-through | store CPU µs/req | commits/req | app forwards/req |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, runs in results.items():
        phase = PHASES[name]
        rps = median(r.rps for r in runs)
        proxy = median(r.proxy_us for r in runs)
        requests = median(r.requests for r in runs)
        forwards = median(r.forwards for r in runs)
        db_us = median(r.db_us for r in runs)
        db_cell = fmt(db_us)
        if phase.server == "competitor" and db_us is not None:
            db_cell += " (Redis)"
        elif phase.server == "sidecar" and store == "sqlite":
            db_cell = "in proxy"
        lines.append(
            f"| {phase.title} | {fmt(rps)} "
            f"| {fmt(rps / base_rps if rps and base_rps else None, 2)} "
            f"| {fmt(median(r.p50_ms for r in runs), 1)} "
            f"| {fmt(median(r.p99_ms for r in runs), 1)} | {fmt(proxy)} "
            f"| {fmt(proxy / base_us if proxy and base_us else None, 2)} | {db_cell} "
            f"| {fmt(median(r.commits for r in runs), 2)} "
            f"| {fmt(forwards / requests if forwards is not None and requests else None, 3)} |")
    if any(PHASES[name].server == "sidecar" for name in results):
        lines.append(f"\nwebhook-sidecar's store: {db}.")
    return "\n".join(lines)


def machine(ctx: Context) -> str:
    model = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    wrk_version = version_of(["wrk", "-v"]).split(" [")[0]
    parts = [f"{model}, {os.cpu_count()} cores", f"Linux {platform.release()}",
             f"Python {platform.python_version()}"]
    if ctx.pg is not None:
        parts.append(f"PostgreSQL {ctx.pg.version}")
    else:
        parts.append(f"SQLite {sqlite3.sqlite_version}")
    parts += [wrk_version, f"app: {ctx.app.kind}",
              f"bench servers' loop: {ctx.loop_name}"]
    if shutil.which("node"):
        parts.append(f"Node {version_of(['node', '--version'])}")
    return "; ".join(parts)


def report(ctx: Context, results: dict[str, list[Result]]) -> tuple[str, bool]:
    args = ctx.args
    conditions = (f"{args.runs} run(s), median; {args.duration:g} s per phase after a "
                  f"{args.warmup:g} s warm-up; wrk {args.threads} thread(s), "
                  f"{args.connections} connections ({args.burst} for bursts); "
                  f"{args.dup_ids} known / {args.unknown_ids} unknown duplicate ids; "
                  f"seed rows {args.seed_rows}; "
                  f"webhook-sidecar on {args.sidecar_loop}, log level {args.log_level}; "
                  f"{datetime.date.today().isoformat()}")
    problems = [f"- {PHASES[name].title}, run {i + 1}: {problem}"
                for name, runs in results.items() for i, r in enumerate(runs)
                for problem in r.problems]
    checks = ("Checks: every answer 2xx; each new event reached the app once, no duplicate "
              "did; no id ran out." if not problems else "Problems:\n" + "\n".join(problems))
    text = (f"Machine: {machine(ctx)}.\n\n{conditions}.\n\n{table(results, args.store)}\n\n"
            f"{added_latency(results)}{checks}\n")
    return text, not problems


def added_latency(results: dict[str, list[Result]]) -> str:
    """The latency webhook-sidecar adds over the pass-through at the same paced rate (half its
    new-event maximum): the difference of the medians of p50 and of p99."""
    ours, floor = results.get("half-new"), results.get("half-passthrough")
    if not ours or not floor:
        return ""
    rate = median(r.rps for r in ours)
    p50 = (median(r.p50_ms for r in ours) or 0.0) - (median(r.p50_ms for r in floor) or 0.0)
    p99 = (median(r.p99_ms for r in ours) or 0.0) - (median(r.p99_ms for r in floor) or 0.0)
    return (f"Latency added over the pass-through at half the proxy's new-event maximum "
            f"(about {fmt(rate)} req/s): p50 {p50:+.1f} ms, p99 {p99:+.1f} ms.\n\n")


def write_docs(text: str) -> None:
    doc = DOCS.read_text()
    if BEGIN not in doc or END not in doc:
        raise BenchError(f"{DOCS} has no {BEGIN} … {END} section to replace")
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    DOCS.write_text(f"{head}{BEGIN}\n{text}{END}{tail}")


# ---------------------------------------------------------------------------------------------
# Main

def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        epilog="Phases: " + ", ".join(PHASES) + ". Competitor phases need node, npm and "
        "redis-server and are skipped without them.")
    parser.add_argument("--store", choices=["postgres", "sqlite"], default="postgres")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per phase")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds before each phase")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="wrk threads")
    parser.add_argument("--phases", default=",".join(PHASES),
                        help="comma-separated, in this order (default: all)")
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
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    parser.add_argument("--write-docs", action="store_true",
                        help=f"replace the marked results section of {DOCS.relative_to(REPO)}")
    args = parser.parse_args(argv)
    args.phase_list = [p.strip() for p in args.phases.split(",") if p.strip()]
    unknown = [p for p in args.phase_list if p not in PHASES]
    if unknown:
        parser.error(f"unknown phase(s) {', '.join(unknown)}; known: {', '.join(PHASES)}")
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
    try:
        ctx.loop_name = loop_label(args.loop)
        if args.store == "postgres" and any(PHASES[p].server == "sidecar" for p in phases):
            ctx.pg = PgStore(os.environ.get("SIDECAR_BENCH_PG_DSN",
                                            "postgresql://postgres@127.0.0.1:5432/postgres"))
            await ctx.pg.open()
        await app.start()
        await prepare_stores(ctx)
        if OPTIONAL & set(phases):
            await ensure_competitor(ctx)
        results: dict[str, list[Result]] = {name: [] for name in phases}
        ctx.results = results
        for run in range(args.runs):
            ctx.run = run
            for name in phases:
                print(f"run {run + 1}/{args.runs}: {name}…", file=sys.stderr, flush=True)
                result = await run_phase(ctx, PHASES[name])
                results[name].append(result)
                print(f"  {result.rps:,.0f} req/s, p50 {result.p50_ms:.1f} ms, proxy "
                      f"{result.proxy_us:,.0f} µs/req"
                      + (f", store {result.db_us:,.0f} µs/req" if result.db_us else "")
                      + (f", commits {result.commits:.2f}/req" if result.commits else "")
                      + (f"; PROBLEMS: {'; '.join(result.problems)}" if result.problems
                         else ""), file=sys.stderr, flush=True)
        text, ok = report(ctx, results)
        print(text)
        if args.write_docs:
            write_docs(text)
            print(f"wrote {DOCS.relative_to(REPO)}", file=sys.stderr)
        return 0 if ok else 1
    finally:
        await procs.stop_all()
        if ctx.pg is not None:
            await ctx.pg.close()


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
