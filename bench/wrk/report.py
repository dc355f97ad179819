"""The report: the table of medians, the machine, the checks, and the results section of
docs/benchmarks.md."""

from __future__ import annotations

import contextlib
import datetime
import math
import os
import platform
import shutil
import sqlite3
import statistics
from collections.abc import Iterable
from pathlib import Path

from bench.wrk.context import Context
from bench.wrk.phases import PHASES, Result
from bench.wrk.procs import REPO, BenchError, version_of

DOCS = REPO / "docs" / "benchmarks.md"
BEGIN = "<!-- bench.wrk results: begin -->"
END = "<!-- bench.wrk results: end -->"
# A run on several stores writes its own block ("MariaDB against PostgreSQL").
STORES_BEGIN = "<!-- bench.wrk stores side by side: begin -->"
STORES_END = "<!-- bench.wrk stores side by side: end -->"


def median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(present) if present else None


def fmt(value: float | None, digits: int = 0, suffix: str = "") -> str:
    if value is None:
        return "—"
    return f"{value:,.{digits}f}{suffix}"


def table(results: dict[str, list[Result]], stores: list[str]) -> str:
    base = results.get("passthrough")
    base_rps = median(r.rps for r in base) if base else None
    base_us = median(r.proxy_us for r in base) if base else None
    fsyncs = "mariadb" in stores
    lines = [
        "| phase | req/s | × pass-through | p50 ms | p99 ms | proxy CPU µs/req "
        "| × pass-through | store CPU µs/req | commits/req "
        + ("| fsyncs/req " if fsyncs else "") + "| app forwards/req |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if fsyncs else "") + "---:|",
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
        elif phase.server == "sidecar" and (phase.store or stores[0]) == "sqlite":
            db_cell = "in proxy"
        lines.append(
            f"| {phase.title} | {fmt(rps)} "
            f"| {fmt(rps / base_rps if rps and base_rps else None, 2)} "
            f"| {fmt(median(r.p50_ms for r in runs), 1)} "
            f"| {fmt(median(r.p99_ms for r in runs), 1)} | {fmt(proxy)} "
            f"| {fmt(proxy / base_us if proxy and base_us else None, 2)} | {db_cell} "
            f"| {fmt(median(r.commits for r in runs), 2)} "
            + (f"| {fmt(median(r.fsyncs for r in runs), 2)} " if fsyncs else "")
            + f"| {fmt(forwards / requests if forwards is not None and requests else None, 3)} |")
    if len(stores) == 1 and any(PHASES[name].server == "sidecar" for name in results):
        lines.append(f"\nwebhook-sidecar's store: {STORE_LABELS[stores[0]]}.")
    return "\n".join(lines)


STORE_LABELS = {"postgres": "PostgreSQL", "mariadb": "MariaDB", "sqlite": "SQLite (in the proxy)"}


def ratios(results: dict[str, list[Result]], stores: list[str]) -> str:
    """Each store after the first against the first, phase by phase, from the medians of the
    same run: req/s, p50, proxy and store CPU per request. (Not commits: each store counts
    them its own way.)"""
    first = stores[0]
    lines = []
    for other in stores[1:]:
        label = f"{STORE_LABELS[other].split(' ')[0]} ÷ {STORE_LABELS[first].split(' ')[0]}"
        lines += [f"| phase: {label} | req/s | p50 | proxy CPU/req | store CPU/req |",
                  "|---|---:|---:|---:|---:|"]
        for name, runs in results.items():
            phase = PHASES[name]
            if phase.store != other:
                continue
            base = results.get(name.rsplit("@", 1)[0] + "@" + first)
            if not base:
                continue
            cells = [quotient(median(getattr(r, field) for r in runs),
                              median(getattr(r, field) for r in base))
                     for field in ("rps", "p50_ms", "proxy_us", "db_us")]
            title = phase.title.rsplit(" — ", 1)[0]
            lines.append(f"| {title} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines) + "\n"  # a blank line: the table ends


def quotient(a: float | None, b: float | None) -> str:
    return fmt(a / b, 2) if a is not None and b else "—"


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
        parts.append(f"PostgreSQL {ctx.pg.version} ({ctx.pg.durability})")
    if ctx.maria is not None:
        parts.append(ctx.maria.version)
    if "sqlite" in ctx.args.stores:
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
    if args.before is not None:
        conditions += (f"; \"— before\" rows: webhook-sidecar from {tree_label(args.before)}, "
                       "measured beside each of this tree's phases (order alternating by run)")
    problems = [f"- {PHASES[name].title}, run {i + 1}: {problem}"
                for name, runs in results.items() for i, r in enumerate(runs)
                for problem in r.problems]
    fanned = any(PHASES[name].destinations for name in results)
    once = "once (once per destination where it has destinations)" if fanned else "once"
    checks = (f"Checks: every answer 2xx; each new event reached the app {once}, no duplicate "
              "did; no id ran out." if not problems else "Problems:\n" + "\n".join(problems))
    side_by_side = ratios(results, args.stores) if len(args.stores) > 1 else ""
    text = (f"Machine: {machine(ctx)}.\n\n{conditions}.\n\n{table(results, args.stores)}\n\n"
            f"{side_by_side}{added_latency(results)}{checks}\n")
    return text, not problems


def tree_label(tree: Path) -> str:
    """A source tree by its git commit when it has one (a worktree), else by its path."""
    rev = version_of(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"])
    return f"{tree} ({rev})" if rev and "fatal" not in rev else str(tree)


def added_latency(results: dict[str, list[Result]]) -> str:
    """The latency webhook-sidecar adds over the pass-through at the same paced rate (half its
    new-event maximum): the difference of the medians of p50 and of p99 (and the same for the
    ``--before`` tree's proxy, when it ran)."""
    floor = results.get("half-passthrough")
    lines = []
    for name, whose in (("half-new@before", "the --before tree's proxy"), ("half-new", "")):
        ours = results.get(name)
        if not ours or not floor:
            continue
        rate = median(r.rps for r in ours)
        p50 = (median(r.p50_ms for r in ours) or 0.0) - (median(r.p50_ms for r in floor) or 0.0)
        p99 = (median(r.p99_ms for r in ours) or 0.0) - (median(r.p99_ms for r in floor) or 0.0)
        lines.append(f"Latency {whose + ' ' if whose else ''}added over the pass-through at "
                     f"half the proxy's new-event maximum (about {fmt(rate)} req/s): "
                     f"p50 {p50:+.1f} ms, p99 {p99:+.1f} ms.\n\n")
    return "".join(lines)


def write_docs(text: str, stores: int = 1) -> None:
    """Replace the results block of docs/benchmarks.md: the one-store block, or for a run on
    several stores the side-by-side block."""
    begin, end = (BEGIN, END) if stores == 1 else (STORES_BEGIN, STORES_END)
    doc = DOCS.read_text()
    if begin not in doc or end not in doc:
        raise BenchError(f"{DOCS} has no {begin} … {end} section to replace")
    head, rest = doc.split(begin, 1)
    _, tail = rest.split(end, 1)
    DOCS.write_text(f"{head}{begin}\n{text}{end}{tail}")
