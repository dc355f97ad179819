"""wrk, the load: one run over a deliveries file, and its summary read back."""

from __future__ import annotations

import asyncio
import json
import math
import re
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.wrk.app import App
from bench.wrk.deliveries import PATH
from bench.wrk.procs import BenchError, die_with_parent

LUA = Path(__file__).resolve().parent / "deliveries.lua"


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
        preexec_fn=die_with_parent)
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


async def prime_with_wrk(app: App, url: str, deliveries: Path, ids: Sequence[str],
                         connections: int, timeout: float = 900.0) -> None:
    """Deliver every id once, fast: wrk runs over the file (past its end it repeats ids,
    harmless duplicates) until the app has received them all, then is interrupted."""
    mark = app.mark()
    wanted = set(ids)
    argv = ["wrk", "-t1", f"-c{connections}", f"-d{timeout:g}s", "--timeout", "15s",
            "-s", str(LUA), url + PATH, "--", str(deliveries), "new", "1", "1"]
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        preexec_fn=die_with_parent)
    try:
        seen = await app.receive(mark, wanted, len(wanted), time.monotonic() + timeout,
                                 stop=lambda: proc.returncode is not None)
        if seen < len(wanted):
            raise BenchError(f"priming stopped with {seen} of {len(wanted)} "
                             "deliveries forwarded")
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()
