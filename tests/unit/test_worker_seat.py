"""A worker group's seat as a state machine (``runtime.workers.seats.Seat``), on real sockets
bound on loopback and a real (finished) process as its worker: what each transition does to
the sockets, and that a transition the invariants forbid is refused."""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import AsyncIterator

import pytest

from sidecar.config.model import Address
from sidecar.runtime.workers.seats import Seat, Worker, bind_listeners

LOOPBACK = Address("127.0.0.1", 0)


@pytest.fixture
async def worker() -> AsyncIterator[Worker]:
    parent_end, child_end = socket.socketpair()
    reader, writer = await asyncio.open_unix_connection(sock=parent_end)
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
    await proc.wait()
    yield Worker(0, proc, reader, writer)
    writer.close()
    child_end.close()


def listening_seat() -> tuple[Seat, int]:
    """A seat whose socket listens, as once its worker has opened its listener."""
    [sockets] = bind_listeners(LOOPBACK, 1, reuse_port=True)
    for sock in sockets:
        sock.listen()
    return Seat(0, sockets), sockets[0].getsockname()[1]


def connects(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return False
    return True


async def test_a_lost_worker_keeps_the_sockets_a_failed_start_closes_them(
    worker: Worker,
) -> None:
    seat, port = listening_seat()
    try:
        seat.fill(worker)
        assert seat.serve(now=10.0) is None and seat.served and seat.listening
        seat.lose(now=20.0)
        assert not seat.served and seat.down
        assert connects(port)  # queued for the successor
        seat.vacate(now=25.0)
        assert seat.vacant and seat.failures == 1 and not seat.down
        assert not connects(port)  # refused: no connection waits for no one
    finally:
        seat.close()


async def test_a_vacant_seat_takes_a_worker_only_once_bound_again(worker: Worker) -> None:
    seat, _ = listening_seat()
    seat.vacate(now=5.0)
    with pytest.raises(AssertionError):
        seat.fill(worker)
    [sockets] = bind_listeners(LOOPBACK, 1, reuse_port=True)
    seat.rebind(sockets)
    try:
        seat.fill(worker)
        assert seat.serve(now=7.5) == 2.5  # without a serving worker since the failed start
        assert seat.lost_at is None and seat.failures == 0
        with pytest.raises(AssertionError):
            seat.rebind(sockets)  # only a vacant seat is bound again
    finally:
        seat.close()
