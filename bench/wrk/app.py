"""The app: nginx `return 200` logging each X-GitHub-Delivery, else bench/app_fast.py."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from bench.wrk.procs import Procs, free_port, version_of, wait_listening, wait_port


class App:
    def __init__(self, procs: Procs, tmp: Path, loop: str) -> None:
        self.procs, self.tmp, self.loop = procs, tmp, loop
        self.ids_log = tmp / "app-ids.log"
        self.kind = ""
        self.url = ""

    async def start(self) -> None:
        self.ids_log.touch()
        nginx = shutil.which("nginx") or next(
            (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.access(p, os.X_OK)),
            None)
        if nginx:
            port = free_port()
            conf = self.tmp / "nginx.conf"
            user = "user root root;\n" if os.geteuid() == 0 else ""
            temp = "".join(f"  {kind}_temp_path {self.tmp}/nginx-{kind};\n"
                           for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
            conf.write_text(
                f"{user}daemon off;\nmaster_process on;\nworker_processes 1;\n"
                f"pid {self.tmp}/nginx.pid;\nerror_log {self.tmp}/nginx-error.log warn;\n"
                "events { worker_connections 4096; }\n"
                "http {\n  access_log off;\n" + temp +
                "  log_format ids '$http_x_github_delivery';\n"
                "  keepalive_requests 10000000;\n  keepalive_timeout 75s;\n"
                "  default_type text/plain;\n"
                f"  server {{\n    listen 127.0.0.1:{port} backlog=1024;\n"
                f"    access_log {self.ids_log} ids;\n"
                "    location / { return 200 'ok\\n'; }\n  }\n}\n")
            version = version_of([nginx, "-v"]).split("/")[-1]
            proc = await self.procs.start(
                "nginx", [nginx, "-p", str(self.tmp), "-c", str(conf),
                          "-e", str(self.tmp / "nginx-error.log")], self.tmp / "nginx.log")
            await wait_port(port, proc)
            self.kind = f"nginx {version} (return 200)"
            self.url = f"http://127.0.0.1:{port}"
        else:
            proc = await self.procs.start(
                "app_fast", [sys.executable, "-m", "bench.app_fast", "--log", str(self.ids_log),
                             "--loop", self.loop], self.tmp / "app_fast.log")
            self.url = "http://" + await wait_listening(proc)
            self.kind = "bench/app_fast.py (nginx not installed)"

    def mark(self) -> int:
        return self.ids_log.stat().st_size

    def since(self, mark: int) -> list[str]:
        with open(self.ids_log, "rb") as handle:
            handle.seek(mark)
            return handle.read().decode(errors="replace").splitlines()

    def complete_lines(self, mark: int) -> tuple[list[str], int]:
        """The whole lines written since ``mark``, and the offset just past the last of them
        (a line still being written is left for the next read, judged on the bytes read)."""
        with open(self.ids_log, "rb") as handle:
            handle.seek(mark)
            data = handle.read()
        end = data.rfind(b"\n") + 1
        return data[:end].decode(errors="replace").splitlines(), mark + end

    async def receive(self, mark: int, wanted: set[str], count: int, deadline: float,
                      stop: Callable[[], bool] = lambda: False, copies: int = 1) -> int:
        """How many of the ``wanted`` ids the app received since ``mark`` (each up to
        ``copies`` times: once per destination), read until it has ``count`` of them,
        ``deadline`` (``time.monotonic()``) is past or ``stop()`` holds."""
        seen: Counter[str] = Counter()
        offset = mark
        while (len(seen) < count or any(n < copies for n in seen.values())) \
                and time.monotonic() < deadline and not stop():
            await asyncio.sleep(0.2)
            lines, offset = self.complete_lines(offset)
            seen.update(i for i in lines if i in wanted)
        return len(seen)
