"""The benchmark's processes: each started in its own session (Ctrl-C reaches only this harness,
which stops them in order) and with a parent-death signal (they die with the harness even if it
is killed); waited for until they listen; their CPU time read from /proc."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")


class BenchError(Exception):
    """A failure that ends the benchmark with a message (exit 1), or 2 for a missing tool."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def die_with_parent() -> None:
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
                preexec_fn=die_with_parent)
        finally:
            os.close(out)
        started = Proc(name, proc, log)
        self.running.append(started)
        return started

    async def stop(self, proc: Proc, sig: signal.Signals = signal.SIGTERM,
                   timeout: float = 10.0) -> None:
        if proc.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.proc.pid, sig)  # not send_signal: its poll can reap behind asyncio
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

