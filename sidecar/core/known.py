"""What this process already knows for certain, so that a duplicate needs no database at all.

Three kinds of fact never change once true, until retention deletes them:

- an event that is ``done``: its row (recorded answer, attempt, body hash) is final — no verb
  changes a done row (release and re-drive refuse it), only retention deletes it;
- a body the replay guard has bound to its first event id (``core.bodyreplay``);
- an event accepted in queue mode (with its body hash): every redelivery is answered
  "accepted", whatever its delivery to the app has come to.

Each entry ends no later than the stored fact it mirrors: its expiry is fixed when it is first
learned, from the fact's own time in the store (the row's ``received_at``, the binding's) plus
the provider's retention — retention deletes by that time — and nothing moves it later: a hit
is answered, not learned again, and learning a fact the memory still holds keeps the earlier
expiry. So the memory never answers for longer than the database would.

Two clocks meet here. The store dates facts by its own clock; the memory runs on a monotonic
one. They are joined once, at learning time (:meth:`KnownAnswers.until`): only the fact's age
comes from the store (``now - received_at``, both by its clock), and it is counted from a
moment read before the store was asked, so the entry ends before retention can have deleted
the fact, whatever the clocks' offsets.

The memory is bounded in bytes (a recorded answer carries the app's response body) and forgets
the least recently used entries first. Pure data: the clock is passed in, nothing here does I/O.

A done row is kept with the answer its duplicates get (``answers.replayed``), built once, and
that answer with its ``Encoded`` slot: the HTTP shell serialises it at the first duplicate and
writes the same bytes for every later one (``http/known_answer.py``).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

from sidecar.core.answers import Answer, Encoded, replayed
from sidecar.core.events import EventRow, EventState

ENTRY_OVERHEAD: Final = 400  # bytes per entry besides the response: keys, row, bookkeeping


def row_size(row: EventRow) -> int:
    """Its bytes in the memory: the headers counted twice (the row's, and the head of its
    answer once serialised; the body is written from the row's own copy)."""
    response = row.response
    if response is None:
        return ENTRY_OVERHEAD
    return (ENTRY_OVERHEAD + len(response.body)
            + 2 * sum(len(name) + len(value) for name, value in response.headers))


@dataclass(frozen=True, slots=True)
class KnownDone:
    """A done row this process knows, and the answer its duplicates get: the same value every
    time, so its bytes are made once (``Answer.encoded``)."""

    row: EventRow
    answer: Answer


class Stored(Protocol):
    """A fact as the store answered it (``EventRow``, ``NonceBinding``): when it was first
    stored and the store's clock at the answer, both epoch seconds by the store's clock."""

    @property
    def received_at(self) -> float: ...

    @property
    def now(self) -> float: ...


class KnownAnswers:
    """Done rows, accepted events and replay-guard bindings by key, each until its stored
    fact's retention ends, bounded to ``capacity`` bytes (0: off)."""

    def __init__(self, capacity: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._capacity = capacity
        self._clock = clock
        # key → (the fact, when it expires on ``clock``, its size)
        self._entries: OrderedDict[tuple[str, str, str], tuple[object, float, int]] = (
            OrderedDict())
        self._size = 0

    @property
    def enabled(self) -> bool:
        return self._capacity > 0

    @property
    def size(self) -> int:
        return self._size

    def __len__(self) -> int:
        return len(self._entries)

    # -- when a fact ends ------------------------------------------------------------------

    def now(self) -> float:
        """This memory's clock: read it just before asking the store, and pass it to
        :meth:`until` with what the store answered."""
        return self._clock()

    def until(self, asked: float, retention: float, fact: Stored | None = None) -> float:
        """When retention deletes ``fact``, on this memory's clock: ``retention`` after it was
        first stored. ``asked``: :meth:`now` before the store call that answered it; its age at
        the answer counted from then, the entry ends up to one round trip early, never late.
        No ``fact``: that call stored it (age 0)."""
        age = max(0.0, fact.now - fact.received_at) if fact is not None else 0.0
        return asked + retention - age

    # -- done events ------------------------------------------------------------------------

    def done(self, provider: str, event_id: str) -> KnownDone | None:
        found = self._get(("done", provider, event_id))
        return found if isinstance(found, KnownDone) else None

    def remember_done(self, row: EventRow, until: float) -> None:
        """Keep a done row until ``until`` (:meth:`until` of its ``received_at``)."""
        if row.state is not EventState.DONE:
            return
        answer = replayed(row.response, row.attempt)
        answer = Answer(answer.status, answer.headers, answer.body, answer.result,
                        encoded=Encoded())
        self._put(("done", row.provider, row.event_id), KnownDone(row, answer), until,
                  row_size(row))

    # -- events accepted in queue mode ------------------------------------------------------

    def accepted(self, provider: str, event_id: str) -> bytes | None:
        """The body hash the event was accepted with, if this process knows it accepted."""
        found = self._get(("accepted", provider, event_id))
        return found if isinstance(found, bytes) else None

    def remember_accepted(self, provider: str, event_id: str, digest: bytes,
                          until: float) -> None:
        """Keep an accepted event until ``until`` (:meth:`until` of its row's
        ``received_at``)."""
        self._put(("accepted", provider, event_id), digest, until, ENTRY_OVERHEAD)

    # -- replay-guard bindings --------------------------------------------------------------

    def bound(self, provider: str, guard: str) -> bytes | None:
        found = self._get(("bound", provider, guard))
        return found if isinstance(found, bytes) else None

    def remember_bound(self, provider: str, guard: str, ids: bytes, until: float) -> None:
        """Keep a binding until ``until`` (:meth:`until` of when it was first bound)."""
        self._put(("bound", provider, guard), ids, until, ENTRY_OVERHEAD)

    # -- the bounded map --------------------------------------------------------------------

    def _get(self, key: tuple[str, str, str]) -> object | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        fact, expires, size = entry
        if expires <= self._clock():
            del self._entries[key]
            self._size -= size
            return None
        self._entries.move_to_end(key)
        return fact

    def _put(self, key: tuple[str, str, str], fact: object, until: float, size: int) -> None:
        if self._capacity <= 0 or size > self._capacity:
            return
        now = self._clock()
        old = self._entries.pop(key, None)
        if old is not None:
            self._size -= old[2]
            if old[1] > now:
                # Still live, so the same stored fact, learned again (deliveries that missed it
                # together). Its end was fixed when it was first learned: never later.
                until = min(until, old[1])
        if until <= now:
            return
        self._entries[key] = (fact, until, size)
        self._size += size
        while self._size > self._capacity:
            _, (_, _, dropped) = self._entries.popitem(last=False)
            self._size -= dropped
