"""An asyncio TCP fault proxy for loopback tests (in the spirit of asyncpg's ``TCPFuzzingProxy``
and toxiproxy, neither of which is installable here): it sits between a client and a server and
gives each accepted connection one fault, chosen by a callable when the connection arrives.

Faults, from the client's point of view (the client is the proxy under test, the server the
app):

- ``pass``: bytes flow both ways untouched;
- ``blackhole``: the connection is accepted and read, but nothing reaches the server and no
  answer ever comes (the client must time out);
- ``reset_request``: the first few bytes of the request reach the server, then both sides are
  reset (RST): the server never gets a complete request;
- ``reset_answer``: the whole request reaches the server, which answers; the client is reset
  instead of getting the answer (the app did the work, the client cannot know);
- ``slow_body``: the request reaches the server; its answer's head is relayed, then the body
  trickles one byte per ``slow_interval`` (the client's read timeout must fire).

One fault per connection makes a fault one request when the server answers
``Connection: close``. Loopback only; every task is cancelled by :meth:`FaultProxy.stop`.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import socket
import struct
from collections import Counter
from collections.abc import Callable
from typing import Any

CHUNK = 65536
REQUEST_PREFIX = 16  # bytes of the request that reach the server before a reset_request


class Fault(enum.StrEnum):
    PASS = "pass"
    BLACKHOLE = "blackhole"
    RESET_REQUEST = "reset_request"
    RESET_ANSWER = "reset_answer"
    SLOW_BODY = "slow_body"


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with an RST instead of a FIN (SO_LINGER with a zero timeout)."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class FaultProxy:
    """Listens on 127.0.0.1 (a free port) and relays to ``target_port`` on 127.0.0.1."""

    def __init__(self, target_port: int, choose: Callable[[], Fault],
                 slow_interval: float = 0.5) -> None:
        self.target_port = target_port
        self.choose = choose
        self.slow_interval = slow_interval
        self.counts: Counter[Fault] = Counter()
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> FaultProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        fault = self.choose()
        self.counts[fault] += 1
        try:
            if fault is Fault.BLACKHOLE:
                while await reader.read(CHUNK):
                    pass
                return
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
            try:
                await self._relay(fault, reader, writer, up_reader, up_writer)
            finally:
                up_writer.transport.abort()
        except (OSError, asyncio.IncompleteReadError):
            pass  # the client or the server went away: nothing to relay any more
        finally:
            writer.transport.abort()
            self._tasks.discard(task)

    async def _relay(self, fault: Fault, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter, up_reader: asyncio.StreamReader,
                     up_writer: asyncio.StreamWriter) -> None:
        if fault is Fault.RESET_REQUEST:
            up_writer.write(await reader.read(REQUEST_PREFIX))
            await up_writer.drain()
            _reset(up_writer)
            _reset(writer)
            return
        upstream = asyncio.create_task(_pipe(reader, up_writer))
        try:
            if fault is Fault.PASS:
                await _pipe(up_reader, writer)
            elif fault is Fault.RESET_ANSWER:
                if await up_reader.read(CHUNK):  # the server answered: the client never knows
                    _reset(writer)
            else:
                await self._trickle(up_reader, writer)
        finally:
            upstream.cancel()
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await upstream

    async def _trickle(self, up_reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> None:
        """Relay the answer's head at once, then its body one byte at a time."""
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = await up_reader.read(CHUNK)
            if not chunk:
                return
            head += chunk
        end = head.index(b"\r\n\r\n") + 4
        writer.write(head[:end])
        await writer.drain()
        body = head[end:] or await up_reader.read(CHUNK)
        for i in range(len(body)):
            await asyncio.sleep(self.slow_interval)
            writer.write(body[i:i + 1])
            await writer.drain()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while chunk := await reader.read(CHUNK):
        writer.write(chunk)
        await writer.drain()
    with contextlib.suppress(OSError):
        writer.write_eof()
