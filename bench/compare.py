"""Before and after, side by side: `bench.throughput` on two checkouts, alternating, in one run.

    git worktree add --detach /tmp/before <rev>
    .venv/bin/python -m bench.compare --before /tmp/before [--rounds 3] [--store postgres]

Each round runs the benchmark once on the other checkout and once on this one (the order
alternates from round to round), each as a fresh process with that checkout first on
PYTHONPATH. The table gives the median of the rounds per store and scenario, and the ratio
after/before; the same machine, services and load driver serve both. Bounded by
rounds x 2 x the benchmark's own bound; loopback only.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def run(tree: Path, store: str, events: int) -> dict[tuple[str, str], tuple[float, float]]:
    """One benchmark run on ``tree``: (store, scenario) -> (req/s, p50 ms)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, "-m", "bench.throughput", "--store", store, "--events", str(events)],
        cwd=tree, env=env, check=True, capture_output=True, text=True, timeout=900,
    ).stdout
    results: dict[tuple[str, str], tuple[float, float]] = {}
    for line in out.splitlines():
        # store, scenario (words), requests, req/s, p50 ms, p99 ms, statuses
        parts = line.split()
        if not parts or parts[0] not in ("sqlite", "postgres"):
            continue
        statuses = next(i for i, p in enumerate(parts) if p.startswith("{"))
        requests = statuses - 4  # requests, req/s, p50, p99 stand before the statuses
        scenario = " ".join(parts[1:requests])
        rps, p50 = float(parts[requests + 1]), float(parts[requests + 2])
        results[(parts[0], scenario)] = (rps, p50)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="the other checkout")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--store", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--events", type=int, default=3000)
    args = parser.parse_args()
    trees = {"before": args.before.resolve(), "after": HERE}
    samples: dict[str, dict[tuple[str, str], list[tuple[float, float]]]] = {
        "before": {}, "after": {}}
    for round_ in range(args.rounds):
        order = ["before", "after"] if round_ % 2 == 0 else ["after", "before"]
        for which in order:
            for key, value in run(trees[which], args.store, args.events).items():
                samples[which].setdefault(key, []).append(value)
            print(f"round {round_ + 1}: {which} done", file=sys.stderr, flush=True)
    print(f"medians of {args.rounds} rounds, {args.events} events each")
    print(f"{'store':<9} {'scenario':<28} {'before req/s':>12} {'after req/s':>12} {'ratio':>6}"
          f" {'before p50':>10} {'after p50':>10}")
    for key in samples["after"]:
        before = samples["before"].get(key)
        if not before:
            continue
        b_rps = statistics.median(s[0] for s in before)
        a_rps = statistics.median(s[0] for s in samples["after"][key])
        b_p50 = statistics.median(s[1] for s in before)
        a_p50 = statistics.median(s[1] for s in samples["after"][key])
        print(f"{key[0]:<9} {key[1]:<28} {b_rps:>12.0f} {a_rps:>12.0f} {a_rps / b_rps:>6.2f}"
              f" {b_p50:>10.1f} {a_p50:>10.1f}")


if __name__ == "__main__":
    main()
