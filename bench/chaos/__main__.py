"""``python -m bench.chaos``: the command line (the package's docstring says what it does)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import signal
import sys
import tempfile
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path

from bench import chaos, sabotage
from bench.chaos.database import STORES
from bench.chaos.report import DOCS, Outcome, report, results_markdown, summary, table, write_docs
from bench.chaos.run import run_once
from bench.chaos.scenarios import CONTROL, SCENARIOS
from bench.chaos.settings import DEFAULTS, Settings
from tests.support import REPO


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos",
                                     description=(chaos.__doc__ or "").split("\n\n")[0])
    names = [*SCENARIOS, CONTROL.name]
    parser.add_argument("--scenario", action="append", choices=names,
                        help=f"run only these (repeatable; default: all {len(SCENARIOS)})")
    parser.add_argument("--runs", type=int, default=1, help="runs of each scenario")
    parser.add_argument("--store", choices=STORES, default="postgres",
                        help="the replicas' store, a private server each run: postgres (an "
                        "initdb cluster) or mariadb (a mariadbd, every commit fsynced); every "
                        "scenario has its MariaDB form: SIGSTOP/SIGKILL of mariadbd, KILL "
                        "CONNECTION, SELECT … FOR UPDATE (default: postgres)")
    parser.add_argument("--break", dest="break_", metavar="NAME[,NAME]",
                        help="run the replicas as a deliberately broken build: "
                             + ", ".join(sabotage.BREAKS))
    parser.add_argument("--write-docs", action="store_true",
                        help=f"replace the results block in {DOCS.relative_to(REPO)}")
    parser.add_argument("--seconds", type=float, default=DEFAULTS.seconds)
    parser.add_argument("--rate", type=float, default=DEFAULTS.rate)
    parser.add_argument("--give-up", type=float, default=DEFAULTS.give_up)
    parser.add_argument("--duplicate-share", type=float, default=DEFAULTS.duplicate_share)
    parser.add_argument("--lock-hold", type=float, default=DEFAULTS.lock_hold,
                        help="row-locks: seconds each lock is held")
    parser.add_argument("--seed", type=int, help="seed of the run's randomness (default: random)")
    parser.add_argument("--result-commit", choices=("wait", "no_wait"), default="wait",
                        help="the replicas' store.result_commit (default: wait)")
    parser.add_argument("--verbose", action="store_true", help="list every repeat")
    args = parser.parse_args(argv)
    if not 1 <= args.runs <= 20:
        parser.error("--runs must be between 1 and 20")
    if not 5 <= args.seconds <= 60 or not 0 < args.rate <= 50:
        parser.error("--seconds must be 5–60 and --rate at most 50 (keep the load light)")
    if not 0.5 <= args.lock_hold <= 10:
        parser.error("--lock-hold must be 0.5–10 seconds")
    if args.store == "mariadb" and args.result_commit == "no_wait":
        parser.error("--result-commit no_wait is PostgreSQL's (the MySQL store refuses it)")
    if args.store == "mariadb" and args.break_ is not None:
        parser.error("--break patches the PostgreSQL store: use it with --store postgres")
    if args.break_ is not None:
        try:
            sabotage.names(args.break_)
        except ValueError as exc:
            parser.error(str(exc))
    return args


@contextlib.contextmanager
def broken_build(name: str | None) -> Iterator[None]:
    """With ``--break``: the sabotage's environment for every child process, then restored."""
    if name is None:
        yield
        return
    saved = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="sidecar-chaos-break-") as tmp:
        os.environ.update(sabotage.install(Path(tmp), name))
        try:
            yield
        finally:
            os.environ.clear()
            os.environ.update(saved)


async def main_async(args: argparse.Namespace) -> int:
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    settings = Settings(seconds=args.seconds, rate=args.rate, give_up=args.give_up,
                        duplicate_share=args.duplicate_share, lock_hold=args.lock_hold,
                        result_commit=args.result_commit, store=args.store)
    chosen = [SCENARIOS.get(name) or CONTROL for name in (args.scenario or SCENARIOS)]
    seeds = random.Random(args.seed)
    outcomes: list[Outcome] = []
    broken: list[str] = []  # runs the harness itself could not complete: no verdict
    with broken_build(args.break_):
        for scenario in chosen:
            for number in range(1, args.runs + 1):
                seed = seeds.randrange(2**32)
                print(f"-- {scenario.name} run {number}/{args.runs} (seed {seed}): "
                      f"{scenario.title}", flush=True)
                try:
                    found = await run_once(scenario, settings, number, seed)
                except Exception:  # the harness failed (not the proxy): say so, go on
                    traceback.print_exc()
                    broken.append(f"HARNESS ERROR {scenario.name} run {number} (seed {seed}):"
                                  " no verdict, see the traceback above")
                    continue
                outcomes += found
                for outcome in found:
                    print(report(outcome, args.verbose), flush=True)
    print("\n" + "\n".join(table(outcomes)))
    if args.write_docs:
        setup = (f"Load: {args.rate:g} new events/s for {args.seconds:g} s per run, "
                 f"{args.duplicate_share:.0%} of them delivered twice at once; give-up "
                 f"{args.give_up:g} s.")
        if args.break_:
            setup += f" **Broken build: `--break {args.break_}`.**"
        # Fan-out scenarios alone have their block; any other run, its store's.
        block = "fanout" if all(s.destinations for s in chosen) else args.store
        write_docs(results_markdown(outcomes, setup, block), block)
        print(f"results written to {DOCS}")
    verdict, passed = summary(outcomes)
    print(verdict, file=sys.stdout if passed else sys.stderr)
    for line in broken:
        print(line, file=sys.stderr)
    return 0 if passed and not broken else 1


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        code = asyncio.run(main_async(args))
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("interrupted; clusters and processes were stopped", file=sys.stderr)
        code = 130
    raise SystemExit(code)


if __name__ == "__main__":
    main()
