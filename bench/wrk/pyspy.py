"""--py-spy: each Python server's measured window profiled, and its top functions."""

from __future__ import annotations

import math
import re
from pathlib import Path

from bench.wrk.context import Context
from bench.wrk.phases import Phase
from bench.wrk.procs import Proc


async def start_py_spy(ctx: Context, phase: Phase, server: Proc) -> Proc | None:
    if ctx.args.py_spy is None or phase.server not in ("sidecar", "passthrough", "hello"):
        return None
    target = Path(ctx.args.py_spy) / f"{phase.name}-run{ctx.run + 1}.folded"
    return await ctx.procs.start(
        "py-spy", ["py-spy", "record", "--pid", str(server.pid), "--rate", "250",
                   "--duration", str(math.ceil(ctx.args.duration)), "--output", str(target),
                   "--format", "raw", "--nonblocking"], ctx.path("py-spy.log"))


def profile_summary(folded: Path, top: int = 15) -> str:
    """py-spy's collapsed stacks in two views, as shares of all samples: where the samples
    were (self time, by package; a socket send on loopback includes the receiver's kernel work)
    and which of webhook-sidecar's own functions they were under (inclusive; coroutine stacks
    start at the coroutine, so the event loop's frames do not enclose them all)."""
    own: dict[str, int] = {}
    under: dict[str, int] = {}
    total = 0
    for line in folded.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        samples = int(count)
        total += samples
        frames = stack.split(";")
        match = re.search(r"\(([^)]*)\)$", frames[-1])
        path = match[1] if match else ""
        if re.search(r"selector_events\.py:\d+\)$", frames[-1]) and ".write " in frames[-1]:
            where = "socket send (system call)"
        elif path.startswith("selectors.py"):
            where = "waiting in epoll"
        else:
            where = path.split("/")[0] if "/" in path else (path.split(":")[0] or "?")
        own[where] = own.get(where, 0) + samples
        for frame in {f for f in frames if "(sidecar/" in f}:
            under[frame] = under.get(frame, 0) + samples
    if not total:
        return f"{folded}: no samples"
    lines = [f"{folded}: {total} samples; self time by package:"]
    lines += [f"  {n / total:6.1%}  {name}"
              for name, n in sorted(own.items(), key=lambda x: -x[1])[:top]]
    lines.append("under webhook-sidecar's functions (inclusive):")
    ranked = sorted(((n, f) for f, n in under.items()
                     if not re.search(r"\((sidecar/__main__|sidecar/cli/__init__)\.py", f)),
                    key=lambda x: -x[0])
    lines += [f"  {n / total:6.1%}  {frame}" for n, frame in ranked[:top]]
    return "\n".join(lines)
