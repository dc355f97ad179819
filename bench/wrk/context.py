"""What every part of one benchmark run shares."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from bench.wrk.app import App
from bench.wrk.mariadb import MariaStore
from bench.wrk.phases import Phase, Result
from bench.wrk.procs import Proc, Procs
from bench.wrk.stores import PgStore


@dataclass
class Context:
    args: argparse.Namespace
    tmp: Path
    procs: Procs
    app: App
    pg: PgStore | None = None
    maria: MariaStore | None = None
    sqlite_template: Path | None = None
    redis: Proc | None = None
    redis_url: str = ""
    run: int = 0
    serial: int = 0
    loop_name: str = ""
    results: dict[str, list[Result]] = field(default_factory=dict)

    def store_of(self, phase: Phase) -> str:
        """The store a webhook-sidecar phase runs on: its own, else --store's only one."""
        return phase.store or self.args.stores[0]

    def path(self, name: str) -> Path:
        self.serial += 1
        return self.tmp / f"{self.serial:03d}-{name}"
