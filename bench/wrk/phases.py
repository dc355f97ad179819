"""What the benchmark measures: its phases, and what one run of a phase yields."""

from __future__ import annotations

from dataclasses import dataclass, field, replace


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
    before: bool = False  # webhook-sidecar run from --before's source tree instead of this one
    store: str = ""  # postgres | sqlite | mariadb; "" for --store's only one
    # Queue mode with this many destinations (all to the one app), each event reaching it
    # once per destination; 0: the provider's own upstream.
    destinations: int = 0


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
    Phase("fanout1", "sidecar, queue mode, 1 destination (the fan-out hop)", "sidecar", "new",
          queue=True, destinations=1),
    Phase("fanout3", "sidecar, queue mode, 3 destinations", "sidecar", "new", queue=True,
          destinations=3),
]}
OPTIONAL = {"competitor", "competitor-dups"}
NOT_BY_DEFAULT = {"fanout1", "fanout3"}  # the cost per destination: --phases queue,fanout1,…
BEFORE = "@before"
STORES = {"postgres": "PostgreSQL", "mariadb": "MariaDB", "sqlite": "SQLite"}


def with_before(names: list[str]) -> list[str]:
    """``names`` with each webhook-sidecar phase preceded by its ``<name>@before`` twin (the
    same workload, the proxy run from another source tree), registered in ``PHASES``. A
    ``half-`` twin is paced like its phase: half of what ``new`` (this tree) reached."""
    out: list[str] = []
    for name in names:
        phase = PHASES[name]
        if phase.server == "sidecar":
            twin = replace(phase, name=name + BEFORE, title=phase.title + " — before",
                           before=True)
            PHASES[twin.name] = twin
            out.append(twin.name)
        out.append(name)
    return out


def with_stores(names: list[str], stores: list[str]) -> list[str]:
    """``names`` with each webhook-sidecar phase replaced by one twin per store,
    ``<name>@<store>`` (the same workload on that store), registered in ``PHASES``; the
    twins of one phase stand together, so that they run one after the other."""
    out: list[str] = []
    for name in names:
        phase = PHASES[name]
        if phase.server != "sidecar":
            out.append(name)
            continue
        for store in stores:
            twin = replace(phase, name=f"{name}@{store}",
                           title=f"{phase.title} — {STORES[store]}", store=store)
            PHASES[twin.name] = twin
            out.append(twin.name)
    return out


def run_order(names: list[str], run: int) -> list[str]:
    """Odd runs measure each ``@before`` twin after its phase rather than before it, and each
    run starts a phase's store twins from the next store, so that no tree or store always
    goes first."""
    out = list(names)
    i = 0
    while i < len(out):
        base = out[i].split("@", 1)[0]
        j = i
        while j < len(out) and out[j].split("@", 1)[0] == base:
            j += 1
        group = out[i:j]
        if any(PHASES[n].store for n in group):
            shift = run % len(group)
            out[i:j] = group[shift:] + group[:shift]
        elif run % 2 == 1 and len(group) == 2 and group[0].endswith(BEFORE):
            out[i:j] = group[::-1]
        i = j
    return out


@dataclass
class Result:
    """One run of a phase: CPU per request in µs, commits (and on MariaDB fsyncs) per request,
    and what its checks found wrong."""

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
    fsyncs: float | None = None  # MariaDB's fsyncs per request (InnoDB's log and data files)

