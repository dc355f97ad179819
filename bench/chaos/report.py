"""Reporting for the chaos suite (``bench.chaos``): a run's outcome, its counts, their table,
the console report, and the results block of docs/chaos.md with the machine it ran on."""

from __future__ import annotations

import datetime
import os
import platform
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.chaos.history import History, is_2xx
from bench.chaos.invariants import MEANING, Invariant, Violation
from bench.chaos.repeats import repeats
from tests.pgserver import find_bindir
from tests.support import REPO

DOCS = REPO / "docs" / "chaos.md"
# The results block of each store in docs/chaos.md, between its two markers.
MARKERS = {
    "postgres": ("<!-- BEGIN chaos results (written by python -m bench.chaos --write-docs) -->",
                 "<!-- END chaos results -->"),
    "mariadb": ("<!-- BEGIN chaos results, MariaDB (written by python -m bench.chaos "
                "--store mariadb --write-docs) -->", "<!-- END chaos results, MariaDB -->"),
    # A run of fan-out scenarios only (each destination a row): a block of their own.
    "fanout": ("<!-- BEGIN chaos results, fan-out (written by python -m bench.chaos "
               "--scenario fanout-kill --write-docs) -->", "<!-- END chaos results, fan-out -->"),
}


@dataclass
class Outcome:
    """One run of one scenario: its history and what the checker made of it."""

    scenario: str
    run: int
    seconds: float
    history: History
    violations: list[Violation]
    tally: Tally
    notes: list[str]
    server: str = ""  # MariaDB's version and durability settings (PostgreSQL: read from disk)

    @property
    def passed(self) -> bool:
        return not self.violations


@dataclass(frozen=True, slots=True)
class Tally:
    """A run's counts, for the report."""

    events: int
    deliveries: int
    ok_2xx: int
    status_409: int
    status_503: int
    other_5xx: Mapping[int, int]  # 5xx other than 503, by code
    other: Mapping[str, int]  # other 4xx by code, and "none" for no answer
    app_requests: int
    repeats: int  # events the app saw more than once
    unjustified: int
    max_latency: float

    def five_xx(self) -> str:
        return " ".join(f"{code}:{n}" for code, n in sorted(self.other_5xx.items())) or "-"

    def others(self) -> str:
        return " ".join(f"{code}:{n}" for code, n in sorted(self.other.items())) or "-"


def tally(h: History) -> Tally:
    codes = Counter(d.status for d in h.deliveries)
    found = repeats(h)
    return Tally(
        events=len(h.kinds),
        deliveries=len(h.deliveries),
        ok_2xx=sum(n for code, n in codes.items() if is_2xx(code)),
        status_409=codes[409],
        status_503=codes[503],
        other_5xx={c: n for c, n in codes.items() if c is not None and c >= 500 and c != 503},
        other={("none" if c is None else str(c)): n for c, n in codes.items()
               if c is None or (300 <= c < 500 and c != 409)},
        app_requests=len(h.receipts),
        repeats=len(found),
        unjustified=sum(1 for r in found if r.why is None),
        max_latency=max((d.elapsed for d in h.deliveries if d.elapsed is not None),
                        default=0.0),
    )


HEADER = ("| scenario | run | verdict | events | deliveries | 2xx | 409 | 503 | other 5xx "
          "| other | app requests | repeats (unjustified) | max latency / bound | time |")


def table(outcomes: Sequence[Outcome]) -> list[str]:
    """The counts of each run as a Markdown table."""
    return [HEADER, "|" + "---|" * (HEADER.count("|") - 1), *map(table_row, outcomes)]


def table_row(o: Outcome) -> str:
    """A run's counts: answers by status, requests and repeats at the app, latency."""
    t = o.tally
    verdict = "pass" if o.passed else "FAIL: " + ", ".join(
        sorted({str(v.invariant) for v in o.violations}))
    return (f"| {o.scenario} | {o.run} | {verdict} | {t.events} | {t.deliveries} | {t.ok_2xx} "
            f"| {t.status_409} | {t.status_503} | {t.five_xx()} | {t.others()} "
            f"| {t.app_requests} | {t.repeats} ({t.unjustified}) "
            f"| {t.max_latency:.1f} s / {o.history.bound:g} s | {o.seconds:.0f} s |")


def report(o: Outcome, verbose: bool) -> str:
    """One run: what was injected, its counts, every repeat with its justification, notes and
    violations with their evidence."""
    faults = ", ".join(f"{k} {v}" for k, v in o.history.faults.items()) or "none"
    lines = [f"== {o.scenario} run {o.run}: {'PASS' if o.passed else 'FAIL'} "
             f"({o.seconds:.0f} s) ==", f"injected: {faults}", *table([o])]
    found = repeats(o.history)
    if found:
        lines.append(f"repeats at the app ({len(found)}), each with its justification:")
        lines += [f"  {r}" for r in found[: None if verbose else 20]]
    lines += [f"note: {note}" for note in o.notes]
    lines += [f"{v}\n    ({v.invariant}: {MEANING[v.invariant]})" for v in o.violations]
    return "\n".join(lines)


def machine(server: str = "") -> str:
    """The machine and software a run was made on, in one line (``server``: the database
    server's description, when the run read one; else PostgreSQL's binaries' version)."""
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")),
               platform.processor() or "unknown CPU")
    database = server
    if not database:
        try:
            database = subprocess.run([str(find_bindir() / "postgres"), "--version"],
                                      capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError, RuntimeError):
            database = "PostgreSQL (version unknown)"
    revision = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (f"{os.cpu_count()} × {cpu}, {memory:.0f} GiB, Linux {platform.release()}, "
            f"Python {platform.python_version()}, {database}, commit {revision or 'unknown'}")


def results_markdown(outcomes: Sequence[Outcome], setup: str, block: str = "postgres") -> str:
    """The results block of docs/chaos.md (``block``: a key of MARKERS): when, how, on what
    machine, the table, and the first lines of evidence of every violation."""
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    command = " ".join(["python -m bench.chaos", *sys.argv[1:]])
    begin, end = MARKERS[block]
    server = next((o.server for o in outcomes if o.server), "")
    lines = [begin, "", f"Run {when} with `{command}` on: {machine(server)}.", setup,
             "", *table(outcomes)]
    failing = [o for o in outcomes if not o.passed]
    if failing:
        lines += ["", "Violations (first lines of evidence):", ""]
        for o in failing:
            for v in o.violations:
                lines.append(f"- **{o.scenario} run {o.run}**, `{v.invariant}`: {v.summary}")
                lines += [f"  - `{line}`" for line in v.evidence[:3]]
    lines += ["", end]
    return "\n".join(lines)


def write_docs(results: str, block: str = "postgres") -> None:
    """Replace a results block of docs/chaos.md (``block``: a key of MARKERS)."""
    text = DOCS.read_text()
    begin, end = MARKERS[block]
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        raise SystemExit(f"{DOCS}: no results markers to replace")
    DOCS.write_text(pattern.sub(lambda _: results, text))


def summary(outcomes: Sequence[Outcome]) -> tuple[str, bool]:
    """The closing verdict: each failed run with the invariants it broke, or that all passed."""
    failed = [o for o in outcomes if not o.passed]
    if not failed:
        runs = len({(o.scenario.partition("/")[0], o.run) for o in outcomes})
        apart = (f", {len(outcomes)} histories with each fan-out destination's apart"
                 if runs != len(outcomes) else "")
        return (f"all {runs} runs passed every invariant{apart} "
                f"({', '.join(Invariant)})"), True
    return "\n".join(
        f"FAIL {o.scenario} run {o.run}: "
        + ", ".join(sorted({str(v.invariant) for v in o.violations})) for o in failed), False
