"""The event listing's request, shared by the CLI and the admin API (and so the inspector):
its parameters parsed and checked before any store is asked, and its turns, so that listings
never hold more than a few of the connections the deliveries use."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
import weakref
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TypeVar

from sidecar.core.durations import parse_duration
from sidecar.core.errors import ConfigError, OperationError
from sidecar.core.events import EventState, Outcome
from sidecar.core.listing import EventQuery, PageKey, StatusClass
from sidecar.core.ports import OperatorStore

Choice = TypeVar("Choice", EventState, StatusClass, Outcome)

# Listed by the CLI and named in errors; the store accepts each ``EventState``.
STATES = tuple(state.value for state in EventState)

# The listing's page size: by default (as before paging), and at most.
PAGE_LIMIT = 100
MAX_PAGE_LIMIT = 500

STATUS_CLASSES = tuple(c.value for c in StatusClass)
OUTCOMES = tuple(o.value for o in Outcome)

# The instants the listing accepts, epoch seconds [first, last): the years 0001…9999, which
# ISO-8601 can write and both databases represent. PostgreSQL refuses a timestamp beyond its
# range (year 294276) with an error, which must not reach the operator as "store unavailable".
EARLIEST = datetime(1, 1, 1, tzinfo=UTC).timestamp()
LATEST = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC).timestamp()


def query_from(params: Mapping[str, str], providers: Sequence[str], *,
               now: float | None = None) -> EventQuery:
    """The listing's query from request parameters (the admin API's query string, the CLI's
    options): ``provider``, ``state``, ``since`` and ``until`` (ISO-8601, or epoch seconds;
    ``since`` inclusive, ``until`` exclusive), ``id_prefix``, ``status`` (2xx…5xx, or none: no
    answer recorded), ``outcome`` (the last attempt's: response, timeout, …, filtered),
    ``cursor`` (a page's ``next``), ``limit`` (1…500). ``older_than`` (a
    duration, from before these) still works: received before ``now`` minus it (this
    process's clock). ``providers``: every configured one, listed when no ``provider`` is given.
    Raises ``OperationError(400)`` naming what is wrong."""
    provider = params.get("provider") or None
    state = _choice(params, "state", EventState, STATES)
    status = _choice(params, "status", StatusClass, STATUS_CLASSES)
    outcome = _choice(params, "outcome", Outcome, OUTCOMES)
    since = _time(params, "since")
    until = _time(params, "until")
    if params.get("older_than"):
        try:
            older = parse_duration(params["older_than"], "older_than")
        except ConfigError as exc:
            raise OperationError(400, "older_than must be a duration (600, 10m, 2h)") from exc
        # No row was received before the epoch: a cutoff past year 1 lists what year 1 does.
        cutoff = max((time.time() if now is None else now) - older, EARLIEST)
        until = cutoff if until is None else min(until, cutoff)
    try:
        # An empty field (an HTML form's) means "not given", as for every other parameter.
        limit = int(params.get("limit") or PAGE_LIMIT)
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_PAGE_LIMIT:
        raise OperationError(400, f"limit must be a whole number from 1 to {MAX_PAGE_LIMIT}")
    after = None
    if params.get("cursor"):
        try:
            after = PageKey.decode(params["cursor"])
        except ValueError as exc:
            raise OperationError(400, "cursor is not one this listing gave (pass a page's "
                                      "'next' as it is)") from exc
        if (not EARLIEST * 1e6 <= after.received_us <= LATEST * 1e6
                or has_nul(after.provider) or has_nul(after.event_id)):
            raise OperationError(400, "cursor is not one this listing gave (pass a page's "
                                      "'next' as it is)")
    id_prefix = params.get("id_prefix") or None
    for name, text in (("provider", provider), ("id_prefix", id_prefix)):
        if has_nul(text):
            raise OperationError(400, f"{name} must not contain a NUL character")
    return EventQuery(
        providers=(provider,) if provider else tuple(sorted(set(providers))),
        state=state, received_after=since, received_before=until,
        id_prefix=id_prefix, status_class=status, outcome=outcome, after=after, limit=limit)


# Listing pages running at once on one store, and how many more may wait their turn; past
# that a listing is refused as busy (429). A page whose filter few rows pass walks far back
# (seconds, up to the store's statement_timeout, at 10^7 rows) on a connection of the pool the
# deliveries use: a burst of such pages (an inspector refreshed, a script, another site's page
# firing image requests) must not take every connection, nor pile up without end. Per process:
# the CLI's `events list` is a process of its own.
CONCURRENT_LISTINGS = 2
WAITING_LISTINGS = 8
BUSY_RETRY_SECONDS = 2
# How often a waiting listing looks whether its client is still there.
_GONE_CHECK_SECONDS = 0.1


class ListingsBusy(OperationError):
    """429: ``WAITING_LISTINGS`` listings wait already; try again after ``BUSY_RETRY_SECONDS``."""

    def __init__(self) -> None:
        super().__init__(429, f"{CONCURRENT_LISTINGS} listings are running and "
                              f"{WAITING_LISTINGS} waiting: try again in a moment")


class ClientGone(OperationError):
    """The client went away while its listing waited for its turn: nothing was read. 499, as
    nginx logs it; no one receives the answer."""

    def __init__(self) -> None:
        super().__init__(499, "the client went away while its listing waited")


def answer_headers(exc: OperationError) -> dict[str, str] | None:
    """The HTTP headers an operation's refusal is answered with: ``Retry-After`` when busy."""
    return {"Retry-After": str(BUSY_RETRY_SECONDS)} if isinstance(exc, ListingsBusy) else None


class _Turns:
    """Listings' turns on one store: ``CONCURRENT_LISTINGS`` at once, at most
    ``WAITING_LISTINGS`` waiting."""

    def __init__(self) -> None:
        self.running = asyncio.Semaphore(CONCURRENT_LISTINGS)
        self.waiting = 0

    @contextlib.asynccontextmanager
    async def turn(self, gone: Callable[[], bool] | None) -> AsyncIterator[None]:
        if self.running.locked() and self.waiting >= WAITING_LISTINGS:
            raise ListingsBusy
        self.waiting += 1
        try:
            await self._acquire(gone)
        finally:
            self.waiting -= 1
        try:
            yield
        finally:
            self.running.release()

    async def _acquire(self, gone: Callable[[], bool] | None) -> None:
        if gone is None:
            await self.running.acquire()
            return
        # asyncio offers no "client closed" signal to a handler (aiohttp cancels handlers only
        # when told to, which the delivery path must not be): look now and then.
        while True:
            if gone():
                raise ClientGone
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.running.acquire(), _GONE_CHECK_SECONDS)
                return


_listings: weakref.WeakKeyDictionary[OperatorStore, _Turns] = weakref.WeakKeyDictionary()


def turn(store: OperatorStore,
         gone: Callable[[], bool] | None = None) -> contextlib.AbstractAsyncContextManager[None]:
    """A listing's turn on ``store``: entered once it may read (:class:`ListingsBusy` when too
    many wait; :class:`ClientGone` when ``gone()`` says its client left while it waited)."""
    return _listings.setdefault(store, _Turns()).turn(gone)


def _choice(params: Mapping[str, str], name: str, kind: Callable[[str], Choice],
            allowed: Sequence[str]) -> Choice | None:
    value = params.get(name)
    if not value:
        return None
    try:
        return kind(value)
    except ValueError as exc:
        raise OperationError(400, f"{name} must be one of {', '.join(allowed)}") from exc


def _time(params: Mapping[str, str], name: str) -> float | None:
    """An instant as epoch seconds, from epoch seconds or ISO-8601 (UTC unless it says)."""
    value = params.get(name)
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise OperationError(400, f"{name} must be ISO-8601 (2026-11-30T13:56:01Z) or "
                                      "epoch seconds") from None
        seconds = (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
    if not math.isfinite(seconds):
        raise OperationError(400, f"{name} must be a finite time")
    if not EARLIEST <= seconds <= LATEST:
        raise OperationError(400, f"{name} must be from 0001-01-01 to 9999-12-31 (epoch "
                                  f"seconds {EARLIEST:.0f} to {LATEST:.0f})")
    return seconds


def has_nul(text: str | None) -> bool:
    """Whether ``text`` holds a NUL: no stored provider or event id has one (intake refuses
    control characters in event ids), and PostgreSQL refuses it in any text value."""
    return text is not None and "\x00" in text


