"""A TCP relay to PostgreSQL that loses one answer after the commit, for the tests of a write
whose answer was lost (the store must recognise it when the write is repeated).

    async with ReplyEater(port) as eater:
        store = await PostgresStore.connect(eater.relayed(dsn), statement_cache_size=0)
        eater.arm(b"INSERT INTO webhook_event")  # the next statement containing this
        ...                                       # runs, commits, and its answer is lost
        assert eater.fired.is_set()

Without a statement cache each statement's text is on the wire, where the marker is found.
"""

from __future__ import annotations

import asyncio
from types import TracebackType


class ReplyEater:
    """A TCP relay to PostgreSQL that, once armed with a piece of SQL, lets the next statement
    containing it run on the server, swallows the server's whole reply (up to ReadyForQuery,
    so the statement has committed) and cuts the connection: a write that happened but whose
    answer was lost with its connection. One shot; every other byte passes untouched."""

    EXECUTE = b"E\x00\x00\x00\x09\x00\x00\x00\x00\x00"  # Execute, unnamed portal, all rows
    READY = b"Z\x00\x00\x00\x05"  # ReadyForQuery

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.marker: bytes | None = None
        self.fired = asyncio.Event()
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def relayed(self, dsn: str) -> str:
        """``dsn`` (on the target's port) through the relay."""
        return dsn.replace(f":{self.target_port}/", f":{self.port}/")

    async def start(self) -> ReplyEater:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def __aenter__(self) -> ReplyEater:
        return await self.start()

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        trace: TracebackType | None) -> None:
        await self.stop()

    def arm(self, marker: bytes) -> None:
        self.marker = marker

    async def _relay(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        state = {"marked": False, "swallow": False}

        async def upstream() -> None:
            while data := await client_r.read(65536):
                if self.marker is not None and self.marker in data:
                    self.marker, state["marked"] = None, True
                if state["marked"] and self.EXECUTE in data:
                    state["marked"], state["swallow"] = False, True
                server_w.write(data)
                await server_w.drain()

        async def downstream() -> None:
            swallowed = b""
            while data := await server_r.read(65536):
                if state["swallow"]:
                    swallowed += data
                    if self.READY in swallowed:  # committed, and the answer is lost
                        client_w.transport.abort()
                        server_w.transport.abort()
                        self.fired.set()
                        return
                    continue
                client_w.write(data)
                await client_w.drain()

        tasks = {asyncio.create_task(upstream()), asyncio.create_task(downstream())}
        self._tasks |= tasks
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._tasks -= tasks
            client_w.transport.abort()
            server_w.transport.abort()
