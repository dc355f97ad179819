"""The coalescer alone: an idle call goes out at once; calls arriving meanwhile go out together
when it returns, in bounded batches; a waiter that gives up is never sent. Gates (events) hold
a statement "in flight"; nothing sleeps to synchronise."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from sidecar.store.coalesce import Coalescer, fresh


class Db:
    """A fake statement runner: records what went out; ``gate`` holds every statement."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, list[int]]] = []
        self.gate = asyncio.Event()  # holds every statement
        self.gate.set()
        self.batch_gate = asyncio.Event()  # holds batch statements besides
        self.batch_gate.set()
        self.running = 0
        self.most_running = 0

    async def one(self, item: int) -> str:
        self.sent.append(("one", [item]))
        await self._hold()
        if item < 0:
            raise ValueError(f"bad {item}")
        return f"r{item}"

    async def many(self, items: Sequence[int]) -> list[str | BaseException]:
        self.sent.append(("many", list(items)))
        await self.batch_gate.wait()
        await self._hold()
        return [ValueError(f"bad {i}") if i < 0 else f"r{i}" for i in items]

    async def _hold(self) -> None:
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            await self.gate.wait()
        finally:
            self.running -= 1


async def until(condition: object, what: str) -> None:
    for _ in range(1000):
        if callable(condition) and condition():
            return
        await asyncio.sleep(0)
    pytest.fail(f"never: {what}")


async def test_an_idle_call_goes_out_at_once_as_the_single_statement() -> None:
    db = Db()
    coalescer = Coalescer(db.one, db.many)
    assert await coalescer(1) == "r1"
    assert await coalescer(2) == "r2"
    assert db.sent == [("one", [1]), ("one", [2])]
    assert (coalescer.singles, coalescer.batches, coalescer.in_flight) == (2, 0, False)


async def test_calls_arriving_meanwhile_go_out_together_in_bounded_batches() -> None:
    db = Db()
    db.gate.clear()
    coalescer = Coalescer(db.one, db.many, max_batch=4)
    calls = [asyncio.create_task(coalescer(i)) for i in range(10)]
    await until(lambda: db.running == 1, "the first call is in flight")
    assert db.sent == [("one", [0])]  # the others wait for it
    db.gate.set()
    assert await asyncio.gather(*calls) == [f"r{i}" for i in range(10)]
    assert db.sent == [("one", [0]), ("many", [1, 2, 3, 4]), ("many", [5, 6, 7, 8]),
                       ("one", [9])]
    assert db.most_running == 1, "one statement of the kind in flight at a time"
    assert (coalescer.singles, coalescer.batches, coalescer.batched) == (2, 2, 8)
    assert not coalescer.in_flight


async def test_each_caller_gets_its_own_answer_or_failure() -> None:
    db = Db()
    db.gate.clear()
    coalescer = Coalescer(db.one, db.many)
    calls = [asyncio.create_task(coalescer(i)) for i in (1, -2, 3, -4)]
    await until(lambda: db.running == 1, "the first call is in flight")
    db.gate.set()
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert results[0] == "r1" and results[2] == "r3"
    assert [str(r) for r in results[1::2]] == ["bad -2", "bad -4"]
    assert db.sent == [("one", [1]), ("many", [-2, 3, -4])]


async def test_a_waiter_that_gives_up_is_never_sent() -> None:
    db = Db()
    db.gate.clear()
    coalescer = Coalescer(db.one, db.many, wait=0.05)
    first = asyncio.create_task(coalescer(1))
    await until(lambda: db.running == 1, "the first call is in flight")
    cancelled = asyncio.create_task(coalescer(2))
    timed_out = asyncio.create_task(coalescer(3))
    await until(lambda: len(coalescer._waiting) == 2, "two calls wait")
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    with pytest.raises(TimeoutError):  # its own bound, while the statement is still held
        await timed_out
    later = asyncio.create_task(coalescer(4))
    await until(lambda: len(coalescer._waiting) == 3, "the later call waits")
    db.gate.set()
    assert (await first, await later) == ("r1", "r4")
    assert db.sent == [("one", [1]), ("one", [4])], "2 and 3 gave up: never sent"


async def test_a_caller_that_gives_up_in_flight_leaves_the_others_their_answers() -> None:
    db = Db()
    db.gate.clear()
    db.batch_gate.clear()
    coalescer = Coalescer(db.one, db.many)
    first = asyncio.create_task(coalescer(1))
    await until(lambda: db.running == 1, "the first call is in flight")
    batch = [asyncio.create_task(coalescer(i)) for i in (2, 3, 4)]
    await until(lambda: len(coalescer._waiting) == 3, "three calls wait")
    db.gate.set()
    await first
    await until(lambda: db.sent[-1][0] == "many", "the batch is in flight")
    batch[1].cancel()
    db.batch_gate.set()
    assert await batch[0] == "r2" and await batch[2] == "r4"
    with pytest.raises(asyncio.CancelledError):
        await batch[1]


async def test_max_batch_one_sends_every_call_at_once_concurrently() -> None:
    db = Db()
    db.gate.clear()
    coalescer = Coalescer(db.one, db.many, max_batch=1)
    calls = [asyncio.create_task(coalescer(i)) for i in range(5)]
    await until(lambda: db.running == 5, "all five in flight together")
    db.gate.set()
    assert await asyncio.gather(*calls) == [f"r{i}" for i in range(5)]
    assert all(kind == "one" for kind, _ in db.sent)


def test_fresh_copies_keep_class_arguments_and_cause() -> None:
    class Special(RuntimeError):
        pass

    try:
        try:
            raise OSError("socket")
        except OSError as cause:
            raise Special("batch failed") from cause
    except Special as exc:
        copy = fresh(exc)
        assert type(copy) is Special and copy.args == exc.args and copy is not exc
        assert copy.__cause__ is exc.__cause__ and copy.__traceback__ is None
