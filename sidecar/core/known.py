"""What this process already knows for certain, so that a duplicate needs no database at all.

Two kinds of fact never change once true, until retention deletes them:

- an event that is ``done``: its row (recorded answer, attempt, body hash) is final — no verb
  changes a done row (release and re-drive refuse it), only retention deletes it;
- a body the replay guard has bound to its first event id (``core.bodyreplay``);
- an event accepted in queue mode (with its body hash): every redelivery is answered
  "accepted", whatever its delivery to the app has come to.

Each entry is kept at most until the provider's retention would delete it, so the memory never
answers for longer than the database would. The memory is bounded in bytes (a recorded answer
carries the app's response body) and forgets the least recently used entries first. Pure data:
the clock is passed in, nothing here does I/O.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

from sidecar.core.events import EventRow, EventState

ENTRY_OVERHEAD: Final = 400  # bytes per entry besides the response: keys, row, bookkeeping


def row_size(row: EventRow) -> int:
    response = row.response
    if response is None:
        return ENTRY_OVERHEAD
    return (ENTRY_OVERHEAD + len(response.body)
            + sum(len(name) + len(value) for name, value in response.headers))


class KnownAnswers:
    """Done rows and replay-guard bindings by key, bounded to ``capacity`` bytes (0: off)."""

    def __init__(self, capacity: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._capacity = capacity
        self._clock = clock
        # key → (the fact, when it expires on ``clock``, its size)
        self._entries: OrderedDict[tuple[str, str, str], tuple[object, float, int]] = (
            OrderedDict())
        self._size = 0
        self.hits = 0
        self.misses = 0

    @property
    def enabled(self) -> bool:
        return self._capacity > 0

    @property
    def size(self) -> int:
        return self._size

    def __len__(self) -> int:
        return len(self._entries)

    # -- done events ------------------------------------------------------------------------

    def done(self, provider: str, event_id: str) -> EventRow | None:
        found = self._get(("done", provider, event_id))
        return found if isinstance(found, EventRow) else None

    def remember_done(self, row: EventRow, retention: float) -> None:
        """Keep a done row until ``retention`` after it was received (by the row's own clock)."""
        if row.state is not EventState.DONE:
            return
        age = max(0.0, row.now - row.received_at)
        self._put(("done", row.provider, row.event_id), row, retention - age, row_size(row))

    # -- events accepted in queue mode ------------------------------------------------------

    def accepted(self, provider: str, event_id: str) -> bytes | None:
        """The body hash the event was accepted with, if this process knows it accepted."""
        found = self._get(("accepted", provider, event_id))
        return found if isinstance(found, bytes) else None

    def remember_accepted(self, provider: str, event_id: str, digest: bytes,
                          retention: float) -> None:
        self._put(("accepted", provider, event_id), digest, retention, ENTRY_OVERHEAD)

    # -- replay-guard bindings --------------------------------------------------------------

    def bound(self, provider: str, guard: str) -> bytes | None:
        found = self._get(("bound", provider, guard))
        return found if isinstance(found, bytes) else None

    def remember_bound(self, provider: str, guard: str, ids: bytes, retention: float) -> None:
        self._put(("bound", provider, guard), ids, retention, ENTRY_OVERHEAD)

    # -- the bounded map --------------------------------------------------------------------

    def _get(self, key: tuple[str, str, str]) -> object | None:
        entry = self._entries.get(key)
        if entry is None:
            self.misses += 1
            return None
        fact, expires, size = entry
        if expires <= self._clock():
            del self._entries[key]
            self._size -= size
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return fact

    def _put(self, key: tuple[str, str, str], fact: object, lasts: float, size: int) -> None:
        if self._capacity <= 0 or lasts <= 0 or size > self._capacity:
            return
        old = self._entries.pop(key, None)
        if old is not None:
            self._size -= old[2]
        self._entries[key] = (fact, self._clock() + lasts, size)
        self._size += size
        while self._size > self._capacity:
            _, (_, _, dropped) = self._entries.popitem(last=False)
            self._size -= dropped
