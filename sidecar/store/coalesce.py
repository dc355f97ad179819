"""Concurrent calls of one kind, sent to the database together (group commit in the client).

A :class:`Coalescer` wraps one kind of write (a claim, a result write) with two ways to run it:
``one(item)``, the single-row statement, and ``many(items)``, one statement over arrays with
one commit for all of them. The first call finds nothing in flight and goes out at once, as
``one``: an idle proxy pays no added latency. Calls that arrive while a statement of the kind is
in flight wait; when it returns, those waiting go out together (at most ``max_batch`` of them,
in arrival order; a lone waiter goes as ``one``), and calls arriving meanwhile wait for that
statement in turn. So at most one statement of the kind is in flight per coalescer, and under
load each commit (each WAL flush) carries many calls.

Each waiting caller keeps its own bound: it waits at most ``wait`` seconds (then
``TimeoutError``; the adapter says ``StoreError``), and a caller that is cancelled or times
out while still waiting is never sent. A caller whose statement is already in flight when it
stops waiting does not stop the statement (the others in it still want their answers): its
outcome is then unknown to it, as when a single statement is cancelled after it reached the
server. ``many`` answers each item with its value or the exception its caller is to raise;
it does not raise itself.

``max_batch`` <= 1 turns coalescing off: every call runs ``one`` at once, concurrently, as
before (the A/B switch for tests and benchmarks).

``sent(calls)`` hears of every statement as it goes out: how many calls it carries (1: a call
that went alone, as ``one``). Over a coalescer's life the calls it is told of add up to the
calls that were sent; a waiter that gave up before its turn is in none.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from sidecar.core.tracing import StatementNote, statement_note

T = TypeVar("T")
R = TypeVar("R")
E = TypeVar("E", bound=BaseException)

_Waiting = tuple[T, asyncio.Future[R], StatementNote | None]  # a call, its answer, its note

MAX_BATCH = 64
"""Calls per statement at most: bounds the statement's size (parameters are arrays, one
element per call) and the time one statement holds its row locks."""


class Coalescer(Generic[T, R]):
    """See the module docstring. Counters (``singles``, ``batches``, ``batched``) say how the
    calls went out: single-row statements, batch statements, and calls sent in batches."""

    def __init__(
        self,
        one: Callable[[T], Awaitable[R]],
        many: Callable[[Sequence[T]], Awaitable[Sequence[R | BaseException]]],
        *,
        max_batch: int = MAX_BATCH,
        wait: float | None = None,
        sent: Callable[[int], None] = lambda calls: None,
    ) -> None:
        self._one = one
        self._many = many
        self._sent = sent
        self._max_batch = max_batch
        self._wait = wait
        self._busy = False
        self._waiting: collections.deque[_Waiting[T, R]] = collections.deque()
        self._tasks: set[asyncio.Task[None]] = set()
        self.singles = 0
        self.batches = 0
        self.batched = 0

    @property
    def in_flight(self) -> bool:
        """Whether a statement of this kind is in flight."""
        return self._busy

    async def __call__(self, item: T) -> R:
        # The caller's span may ask how its call went out (``core.tracing.statement_note``).
        note = statement_note.get()
        if self._max_batch <= 1:
            self._alone(note)
            return await self._one(item)
        if not self._busy:
            # Nothing in flight: out at once, in the caller's own task.
            self._alone(note)
            self._busy = True
            try:
                return await self._one(item)
            finally:
                self._send_waiting()
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._waiting.append((item, future, note))
        try:
            async with asyncio.timeout(self._wait):
                # Cancelling the caller cancels its future: a waiter is then skipped, and an
                # item already sent gets its answer dropped.
                return await future
        finally:
            future.cancel()  # no-op once answered

    def _send_waiting(self) -> None:
        """After a statement returned: send the calls waiting for it, or go idle."""
        batch: list[_Waiting[T, R]] = []
        while self._waiting and len(batch) < self._max_batch:
            entry = self._waiting.popleft()
            if not entry[1].done():  # gave up while waiting: never sent
                batch.append(entry)
        if not batch:
            self._busy = False
            return
        task = asyncio.get_running_loop().create_task(self._send(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, batch: list[_Waiting[T, R]]) -> None:
        for _, _, note in batch:
            if note is not None:
                note.batch_size = len(batch)
        try:
            results = await self._answers([item for item, _, _ in batch])
        except BaseException as exc:  # cancelled (the loop is shutting down), or a bug
            for _, future, _ in batch:
                if future.done():
                    continue
                if isinstance(exc, Exception):
                    future.set_exception(exc)
                else:
                    future.cancel()
            raise
        else:
            for (_, future, _), result in zip(batch, results, strict=True):
                if future.done():  # its caller gave up
                    continue
                if isinstance(result, BaseException):
                    future.set_exception(result)
                else:
                    future.set_result(result)
        finally:
            self._send_waiting()

    async def _answers(self, items: list[T]) -> Sequence[R | BaseException]:
        if len(items) == 1:
            self._alone()
            try:
                return [await self._one(items[0])]
            except Exception as exc:
                return [exc]
        self.batches += 1
        self.batched += len(items)
        self._sent(len(items))
        results = await self._many(items)
        if len(results) != len(items):
            raise RuntimeError(f"{len(items)} calls sent together, {len(results)} answers")
        return results

    def _alone(self, note: StatementNote | None = None) -> None:
        self.singles += 1
        self._sent(1)
        if note is not None:
            note.batch_size = 1


def fresh(exc: E) -> E:
    """The same failure for another caller of one batch: its own instance (an exception's
    traceback grows wherever it is raised), of the same class, with the same arguments and
    cause. For exceptions built from their arguments alone, like ``StoreError``."""
    each = type(exc)(*exc.args)
    each.__cause__ = exc.__cause__
    return each
