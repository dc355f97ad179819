"""Per simulated day and store: the table; then the goals, pass or fail. Pure functions of the
samples and tallies the run collected."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from bench.soak.locks import LockWait
from bench.soak.stores import Sample

FLAT = 0.10  # cost per event: every settled day within 10% of the settled days' median
STORAGE_SLACK = 1.15  # rows kept: at most (retention + one partition) times a day's volume, +15%


@dataclass(frozen=True, slots=True)
class Day:
    """One store's simulated day: the samples at its start and end, what it answered, what
    the proxy spent, and the lock waits its cluster logged."""

    number: int
    start: Sample
    end: Sample
    seconds: float
    answered: int
    failed: int
    latencies: Sequence[float]
    proxy_cpu_us: float
    waits: Sequence[LockWait]

    @property
    def rate(self) -> float:
        return self.answered / self.seconds if self.seconds else 0.0

    @property
    def p99_ms(self) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000

    def per_event(self, value: float) -> float:
        return value / self.answered if self.answered else float("nan")

    @property
    def pg_us(self) -> float:
        return self.per_event(self.end.pg_cpu_us - self.start.pg_cpu_us)

    @property
    def proxy_us(self) -> float:
        return self.per_event(self.proxy_cpu_us)

    @property
    def commits(self) -> float:
        return self.per_event(self.end.commits - self.start.commits)

    @property
    def wal(self) -> int:
        return self.end.wal_lsn - self.start.wal_lsn


def mib(value: float) -> str:
    return f"{value / 2**20:,.1f}"


def table(store: str, days: Sequence[Day]) -> str:
    head = ("| day | events/s | p99 ms | PG µs/event | proxy µs/event | commits/event | rows "
            "| table+index MiB | partitions | WAL MiB | WAL B/event | autovacuum (analyze) "
            "| lock waits > 100 ms: deliveries (on DDL) / retention's own |")
    lines = [f"**{store}**", "", head, "|" + "---|" * (head.count("|") - 1)]
    for d in days:
        long = [w for w in d.waits if w.waited_ms > 100]
        deliveries = sum(1 for w in long if not w.by_retention)
        on_ddl = sum(1 for w in long if w.on_ddl)
        own = sum(1 for w in long if w.by_retention)
        lines.append(
            f"| {d.number + 1} | {d.rate:,.0f} | {d.p99_ms:,.0f} | {d.pg_us:,.0f} "
            f"| {d.proxy_us:,.0f} | {d.commits:.2f} | {d.end.rows:,} | {mib(d.end.size)} "
            f"| {d.end.partitions} | {mib(d.wal)} | {d.per_event(d.wal):,.0f} "
            f"| {Sample.runs(d.start.vacuums, d.end.vacuums)} "
            f"({Sample.runs(d.start.analyzes, d.end.analyzes)}) "
            f"| {deliveries} ({on_ddl}) / {own} |")
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Goal:
    name: str
    passed: bool
    detail: str

    def line(self) -> str:
        return f"- {'PASS' if self.passed else 'FAIL'} {self.name}: {self.detail}"


def settled(days: Sequence[Day], retention_days: float) -> Sequence[Day]:
    """The days once retention deletes as much as arrives (after the first ``retention``
    days), or every day when the run is shorter than that."""
    after = [d for d in days if d.number >= retention_days]
    return after or days


def goals(store: str, days: Sequence[Day], retention_days: float, partition_days: float,
          events_per_day: int, acked: set[str], receipts: Counter[str],
          failed: int) -> list[Goal]:
    out: list[Goal] = []
    steady = settled(days, retention_days)
    costs = [d.pg_us for d in steady]
    middle = statistics.median(costs) if costs else float("nan")
    spread = max(abs(c - middle) / middle for c in costs) if costs and middle else float("nan")
    out.append(Goal(f"{store}: PostgreSQL CPU per event flat across settled days",
                    spread <= FLAT,
                    f"{', '.join(f'{c:,.0f}' for c in costs)} µs; at most {spread:.0%} from "
                    f"their median (≤ {FLAT:.0%})"))
    span = retention_days + partition_days  # a partition goes once all its rows are past
    bound = span * events_per_day * STORAGE_SLACK
    most = max((d.end.rows for d in days), default=0)
    daily = days[0].end.size - days[0].start.size if days else 0  # the first day's bytes
    largest = max((d.end.size for d in days), default=0)
    out.append(Goal(f"{store}: storage bounded by retention × daily volume",
                    most <= bound and largest <= span * daily * STORAGE_SLACK,
                    f"most rows {most:,} ≤ {bound:,.0f} ((retention + partition) × a day's "
                    f"deliveries, +15%); largest table+index {mib(largest)} MiB ≤ "
                    f"{mib(span * daily * STORAGE_SLACK)} MiB (same × the first day's growth)"))
    # Deliveries that waited over 100 ms for any lock: the holder is not in the log, so every
    # such wait counts against retention (stricter than the goal); retention's own waits only
    # delay retention and are listed in the table.
    waits = [w for d in days for w in d.waits if w.waited_ms > 100 and not w.by_retention]
    out.append(Goal(f"{store}: no delivery waits over 100 ms for a lock (retention's or any)",
                    not waits,
                    f"{len(waits)}" + (f"; longest {max(w.waited_ms for w in waits):,.0f} ms: "
                                       f"{waits[0].mode} on {waits[0].target}: "
                                       f"{waits[0].statement[:80]}" if waits else "")))
    lost = sorted(acked - set(receipts))
    out.append(Goal(f"{store}: nothing lost", not lost and not failed,
                    f"{len(lost)} answered 2xx but never reached the app; {failed} deliveries "
                    f"given up on" + (f" (e.g. {lost[0]})" if lost else "")))
    twice = {k: n for k, n in receipts.items() if n > 1}
    out.append(Goal(f"{store}: nothing forwarded twice", not twice,
                    f"{len(twice)} events reached the app more than once"
                    + (f" (e.g. {next(iter(twice))} ×{max(twice.values())})" if twice else "")))
    return out
