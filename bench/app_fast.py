"""The app behind the proxies when nginx is not installed: a minimal HTTP/1.1 server on a raw
asyncio protocol (uvloop when installed) that answers every request ``200 ok`` and appends the
request's ``X-GitHub-Delivery`` to a log file, one a line, as bench.wrk's nginx does.

    .venv/bin/python -m bench.app_fast --listen 127.0.0.1:PORT --log FILE

It understands exactly what the proxies send it: keep-alive requests with a Content-Length
body (chunked bodies are refused with 501). Not a general server; used by ``bench.wrk``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
from typing import cast

from bench.passthrough import pick_loop

RESPONSE = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n"
            b"Connection: keep-alive\r\n\r\nok\n")
NOT_IMPLEMENTED = (b"HTTP/1.1 501 Not Implemented\r\nContent-Length: 0\r\n"
                   b"Connection: close\r\n\r\n")


class Http(asyncio.Protocol):
    def __init__(self, log_fd: int) -> None:
        self.log_fd = log_fd
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        assert self.transport is not None
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end].decode("latin-1").split("\r\n")
            length = 0
            delivery = ""
            for line in head[1:]:
                name, _, value = line.partition(":")
                name = name.strip().lower()
                if name == "content-length":
                    length = int(value)
                elif name == "x-github-delivery":
                    delivery = value.strip()
                elif name == "transfer-encoding":
                    self.transport.write(NOT_IMPLEMENTED)
                    self.transport.close()
                    return
            if len(self.buffer) < end + 4 + length:
                return
            self.buffer = self.buffer[end + 4 + length:]
            os.write(self.log_fd, f"{delivery}\n".encode())
            self.transport.write(RESPONSE)


async def run(listen: str, log: str, loop_name: str) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    host, _, port = listen.rpartition(":")
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Http(fd), host, int(port), backlog=1024)
    bound = server.sockets[0].getsockname()
    print(json.dumps({"event": "listening", "listen": f"{bound[0]}:{bound[1]}",
                      "loop": loop_name}), flush=True)
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    server.close()
    os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", default="127.0.0.1:0")
    parser.add_argument("--log", required=True, help="file receiving one delivery id a line")
    parser.add_argument("--loop", choices=["auto", "uvloop", "asyncio"], default="auto")
    args = parser.parse_args()
    asyncio.run(run(args.listen, args.log, pick_loop(args.loop)))


if __name__ == "__main__":
    main()
