"""The shell blocks a page presents as runnable, and a runner for them.

The convention, in a Markdown page:

- `<!-- run -->` on the line just before a fenced `sh` block: the block runs, in page order,
  in one shell session per page (`bash -e`), so an `export` in one block holds in the next;
- `<!-- run: serve URL -->`: the block's last command starts a server; the runner starts it in
  the background, waits until URL answers 200, then stops it with SIGTERM and expects exit 0;
- `<!-- file: NAME -->` before any fenced block: its text is written to NAME first (a config
  the page shows and the commands then read).

Blocks without a mark (anything needing a cluster, a provider's CLI or a long run) are prose
to the runner. The blocks run in a copy of the checkout, as after `git clone`, bounded in time.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

MARKED = re.compile(r"^<!-- (?P<kind>run|file)(?::\s*(?P<arg>[^>]*?))?\s*-->\n"
                    r"(?P<fence>```|~~~)[\w-]*\n(?P<body>.*?)^(?P=fence)[ \t]*$", re.M | re.S)


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # where the block's mark is, 1-based
    body: str
    serve: str | None = None  # for `run: serve URL`: the URL that answers once it is up
    file: str | None = None  # for `file: NAME`: where the body goes

    @property
    def where(self) -> str:
        return f"{self.page.name}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The marked blocks of ``page``, in order."""
    text = page.read_text(encoding="utf-8")
    found = []
    for match in MARKED.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        kind, arg, body = match["kind"], (match["arg"] or "").strip(), match["body"]
        if kind == "file":
            assert arg, f"{page.name}:{line}: `file:` needs a name"
            found.append(Block(page, line, body, file=arg))
        elif arg.startswith("serve "):
            found.append(Block(page, line, body, serve=arg.removeprefix("serve ").strip()))
        else:
            assert not arg, f"{page.name}:{line}: unknown run option {arg!r}"
            found.append(Block(page, line, body))
    return found


def _commands(body: str) -> list[str]:
    """The block's commands, continuation lines joined."""
    return [c for c in re.sub(r"[ \t]*\\\n\s*", " ", body).splitlines() if c.strip()]


# Polls a URL until it answers 200 (bounded), from the interpreter running the tests.
_WAIT = ("import sys, time, urllib.request\n"
         "end = time.monotonic() + float(sys.argv[2])\n"
         "while True:\n"
         "    try:\n"
         "        if urllib.request.urlopen(sys.argv[1], timeout=2).status == 200: break\n"
         "    except OSError:\n"
         "        pass\n"
         "    if time.monotonic() > end: sys.exit(f'{sys.argv[1]} never answered 200')\n"
         "    time.sleep(0.1)\n")  # polling a server's readiness, not synchronising on time


def script(page_blocks: list[Block], serve_timeout: float = 30) -> str:
    """One bash script running the blocks in order; each block announces itself on stderr."""
    lines = ["set -e"]
    for block in page_blocks:
        lines.append(f"echo {shlex.quote('--- ' + block.where)} >&2")
        if block.file is not None:
            lines.append(f"cat > {shlex.quote(block.file)} <<'BLOCK_EOF'\n{block.body}BLOCK_EOF")
            continue
        commands = _commands(block.body)
        if block.serve is None:
            lines += commands
            continue
        *before, server = commands
        lines += [*before, f"{server} &", "server=$!",
                  f"\"$DOCS_PYTHON\" -c {shlex.quote(_WAIT)} {shlex.quote(block.serve)} "
                  f"{serve_timeout:g} || {{ kill $server; exit 1; }}",
                  "kill -TERM $server", "wait $server"]
    return "\n".join(lines) + "\n"


def checkout_copy(repo: Path, into: Path) -> Path:
    """The repository's tracked files (as they are in the work tree) under ``into``."""
    listed = subprocess.run(["git", "-C", str(repo), "ls-files", "-z"], capture_output=True,
                            check=True, timeout=60).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = repo / name
        if source.is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    return into


# A network namespace of its own: only a loopback interface, whose ports no other process on
# the machine holds (a page's fixed 8080/9090 cannot collide, and nothing leaves the machine).
PRIVATE_NETWORK = ["unshare", "--user", "--map-root-user", "--net"]


def private_network() -> bool:
    """Whether this machine lets an unprivileged process make its own network namespace."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    done = subprocess.run([*PRIVATE_NETWORK, "ip", "link", "set", "lo", "up"],
                          capture_output=True, timeout=30, check=False)
    return done.returncode == 0


def run(page_blocks: list[Block], cwd: Path, *, timeout: float = 300,
        env: dict[str, str] | None = None, unset: tuple[str, ...] = (),
        isolated: bool = False) -> subprocess.CompletedProcess[str]:
    """Runs the blocks in ``cwd`` with the test interpreter's `bin` on PATH (so the bare
    `webhook-sidecar` of a page is the one under test), without the variables in ``unset`` (the
    page must set them itself); ``isolated``: in a network namespace of its own (see
    ``private_network``). The whole shell is stopped at ``timeout``."""
    environment = {k: v for k, v in {**os.environ, **(env or {})}.items() if k not in unset}
    environment["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{environment['PATH']}"
    environment["DOCS_PYTHON"] = sys.executable
    text = script(page_blocks)
    command = ([*PRIVATE_NETWORK, "bash", "-c", "ip link set lo up\n" + text] if isolated
               else ["bash", "-c", text])
    process = subprocess.Popen(command, cwd=cwd, env=environment,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    try:
        out, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, _ = process.communicate()
        return subprocess.CompletedProcess(process.args, -9, out + "\n(timed out)", "")
    return subprocess.CompletedProcess(process.args, process.returncode, out, "")
