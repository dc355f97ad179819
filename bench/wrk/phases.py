"""What the benchmark measures: its phases, and what one run of a phase yields."""

from __future__ import annotations

from dataclasses import dataclass, field


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


@dataclass
class Result:
    """One run of a phase: CPU per request in µs, commits per request, and what its checks
    found wrong."""

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

