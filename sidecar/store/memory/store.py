"""``MemoryStore``: the in-memory store's forward-mode verbs, nonces and upkeep (queue mode's
are :mod:`~sidecar.store.memory.queue`'s)."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import AsyncIterator

from sidecar.core.events import (
    Attempt,
    AttemptResult,
    Claim,
    EventRow,
    EventState,
    Guard,
    NonceBinding,
    Replayed,
    StoredRequest,
)
from sidecar.core.listing import EventPage, EventQuery, PageKey
from sidecar.core.notices import NoticeKind
from sidecar.store.memory.limits import LimitVerbs
from sidecar.store.memory.providers import ProviderStateVerbs
from sidecar.store.memory.queue import QueueVerbs
from sidecar.store.memory.tables import Event


class MemoryStore(ProviderStateVerbs, QueueVerbs, LimitVerbs):
    """``sidecar.core.ports.Store`` kept in this process's memory: pass it wherever a store is
    taken (the app's ``store=`` argument), or drive it directly.

    ``clock`` (seconds since the Unix epoch) is read once per call: it stamps rows, sets and
    expires leases, ages rows for ``list_events``/``purge``, and is the ``now`` of every
    ``EventRow`` read. Pass your own to move time by hand instead of waiting.

    Use it from one event loop. Each verb yields to the loop once, as a round trip to a database
    would (so that concurrent callers interleave), then acts without awaiting again: a verb is
    atomic, so of N concurrent claims of one key exactly one wins. It is not thread-safe.

    Example, a lease running out on a clock moved by hand::

        >>> import asyncio
        >>> from sidecar.store.memory import MemoryStore
        >>> now = [1_700_000_000.0]
        >>> store = MemoryStore(clock=lambda: now[0])
        >>> async def scenario():
        ...     first = await store.claim("stripe", "evt_1", b"sha", 30.0, "proxy-a")
        ...     early = await store.take_over("stripe", "evt_1", 30.0, "proxy-b")
        ...     now[0] += 30.0  # the lease ends
        ...     late = await store.take_over("stripe", "evt_1", 30.0, "proxy-b")
        ...     return first.won, early, late
        >>> asyncio.run(scenario())
        (True, None, 2)
    """

    def __repr__(self) -> str:
        return f"<MemoryStore events={len(self._events)} nonces={len(self._nonces)}>"

    @contextlib.asynccontextmanager
    async def hold_row(self, provider: str, event_id: str) -> AsyncIterator[None]:
        """For tests: while inside, the row counts as locked by another database session (an
        operator's ``SELECT … FOR UPDATE``): writes to it raise ``RowLocked`` at once, as the
        SQL stores do after their short row-lock wait; reads are unaffected."""
        key = (provider, event_id)
        self._held.add(key)
        try:
            yield
        finally:
            self._held.discard(key)

    # -- the Store verbs: after `_now`, no await -------------------------------------------

    async def claim(self, provider: str, event_id: str, body_sha256: bytes,
                    lease_seconds: float, owner: str,
                    payload: StoredRequest | None = None) -> Claim:
        now = await self._now("claim")
        return self._claim(provider, event_id, body_sha256, lease_seconds, owner, payload, now)

    async def claim_guarded(self, provider: str, event_id: str, body_sha256: bytes,
                            lease_seconds: float, owner: str, guard: Guard,
                            payload: StoredRequest | None = None) -> Claim | Replayed:
        now = await self._now("claim")
        binding = self._bind(provider, guard.key, guard.digest, now)
        if binding.digest != guard.digest:
            return Replayed(binding)
        claim = self._claim(provider, event_id, body_sha256, lease_seconds, owner, payload, now)
        return Claim(claim.won, claim.row, binding)

    def _claim(self, provider: str, event_id: str, body_sha256: bytes, lease_seconds: float,
               owner: str, payload: StoredRequest | None, now: float) -> Claim:
        event = self._events.get((provider, event_id))
        if event is not None:
            return Claim(won=False, row=self._read(event, now))
        event = Event(provider, event_id, bytes(body_sha256), received_at=now, payload=payload,
                      updated_at=now, lease_owner=owner, lease_until=now + float(lease_seconds))
        self._events[(provider, event_id)] = event
        return Claim(won=True, row=self._read(event, now))

    async def take_over(
        self, provider: str, event_id: str, lease_seconds: float, owner: str
    ) -> int | None:
        now = await self._now("take_over")
        self._writable("take_over", (provider, event_id))
        event = self._events.get((provider, event_id))
        if event is None or (provider, event_id) in self._queue or not (
            event.state is EventState.FAILED
            or (event.state is EventState.PROCESSING and event.lease_expired(now))
        ):
            return None
        return event.next_attempt(owner, lease_seconds, now)

    async def complete(
        self, provider: str, event_id: str, attempt: int, result: AttemptResult
    ) -> bool:
        if result.state is EventState.PROCESSING:
            raise ValueError("an attempt's result must be DONE or FAILED, not PROCESSING")
        now = await self._now("complete")
        self._writable("complete", (provider, event_id))
        event = self._events.get((provider, event_id))
        if (event is None or event.state is not EventState.PROCESSING
                or event.attempt != attempt or (provider, event_id) in self._queue):
            return False
        self._attempts.setdefault((provider, event_id), []).append(
            event.record(result.state, result, now))
        return True

    async def get(self, provider: str, event_id: str) -> EventRow | None:
        now = await self._now("get")
        event = self._events.get((provider, event_id))
        return self._read(event, now) if event is not None else None

    async def list_events(self, provider: str | None = None, state: EventState | None = None,
                          limit: int = 100, older_than_seconds: float | None = None,
                          ) -> list[EventRow]:
        now = await self._now("list_events")
        wanted = EventState(state) if state is not None else None
        cutoff = now - float(older_than_seconds) if older_than_seconds is not None else None
        found = [
            e for e in self._events.values()
            if (provider is None or e.provider == provider)
            and (wanted is None or e.state is wanted)
            and (cutoff is None or e.received_before(cutoff))
        ]
        found.sort(key=lambda e: (-e.received_at, e.provider, e.event_id))
        return [self._read(e, now) for e in found[:max(limit, 0)]]

    async def attempts(self, provider: str, event_id: str) -> list[Attempt]:
        await self._now("attempts")
        return list(self._attempts.get((provider, event_id), ()))

    async def list_page(self, query: EventQuery) -> EventPage:
        now = await self._now("list_page")
        wanted = set(query.providers)
        after = query.after

        def key(e: Event) -> tuple[int, str, str]:
            return (-_micros(e.received_at), e.provider, e.event_id)

        def passes(e: Event) -> bool:
            status = e.response.status if e.response is not None else None
            status_class = f"{status // 100}xx" if status is not None else "none"
            return (
                e.provider in wanted
                and (after is None
                     or key(e) > (-after.received_us, after.provider, after.event_id))
                and (query.received_after is None or e.received_at >= query.received_after)
                and (query.received_before is None or e.received_at < query.received_before)
                and (query.state is None or e.state is query.state)
                and (query.id_prefix is None or e.event_id.startswith(query.id_prefix))
                and (query.status_class is None or status_class == query.status_class.value)
                and (query.outcome is None or e.outcome is query.outcome)
            )

        found = sorted((e for e in self._events.values() if passes(e)), key=key)
        kept = found[:max(query.limit, 0)]
        last = kept[-1] if len(found) > len(kept) and kept else None
        return EventPage(
            rows=tuple(self._read(e, now) for e in kept),
            next=(PageKey(_micros(last.received_at), last.provider, last.event_id)
                  if last is not None else None))

    async def get_payload(self, provider: str, event_id: str) -> StoredRequest | None:
        await self._now("get_payload")
        event = self._events.get((provider, event_id))
        return event.payload if event is not None else None

    async def stuck_counts(self) -> dict[str, int]:
        now = await self._now("stuck_counts")
        return dict(Counter(e.provider for e in self._events.values()
                            if e.stuck(now) and (e.provider, e.event_id) not in self._queue))

    async def release(self, provider: str, event_id: str, *, force: bool = False) -> bool:
        now = await self._now("release")
        self._writable("release", (provider, event_id))
        event = self._events.get((provider, event_id))
        if (event is None or event.state not in (EventState.PROCESSING, EventState.FAILED)
                or (provider, event_id) in self._queue):
            return False
        if event.state is EventState.PROCESSING and not force and not event.lease_expired(now):
            return False
        event.state = EventState.FAILED
        event.lease_owner, event.lease_until = None, None
        event.updated_at = now
        return True

    async def purge(self, provider: str, older_than_seconds: float, batch_size: int) -> int:
        now = await self._now("purge")
        cutoff = now - float(older_than_seconds)
        doomed = sorted(
            (e for e in self._events.values()
             if e.provider == provider and e.received_before(cutoff)
             and (e.state is not EventState.PROCESSING or e.lease_expired(now))
             and not self._pending((e.provider, e.event_id))),
            key=lambda e: e.received_at,
        )[:max(batch_size, 0)]
        for e in doomed:
            del self._events[(e.provider, e.event_id)]
            self._queue.pop((e.provider, e.event_id), None)
            self._attempts.pop((e.provider, e.event_id), None)
        return len(doomed)

    async def bind_nonce(self, provider: str, nonce: str, body_sha256: bytes) -> NonceBinding:
        now = await self._now("bind_nonce")
        return self._bind(provider, nonce, body_sha256, now)

    def _bind(self, provider: str, nonce: str, body_sha256: bytes, now: float) -> NonceBinding:
        bound, received_at = self._nonces.setdefault((provider, nonce),
                                                     (bytes(body_sha256), now))
        return NonceBinding(bound, received_at, now)

    async def purge_nonces(self, provider: str, older_than_seconds: float,
                           batch_size: int) -> int:
        now = await self._now("purge_nonces")
        cutoff = now - float(older_than_seconds)
        doomed = sorted(
            (key for key, (_, received_at) in self._nonces.items()
             if key[0] == provider and received_at < cutoff),
            key=lambda key: self._nonces[key][1],
        )[:max(batch_size, 0)]
        for key in doomed:
            del self._nonces[key]
        return len(doomed)

    async def ping(self) -> None:
        await self._now("ping")

    async def claim_notice(self, target: str, kind: NoticeKind, provider: str,
                           interval_seconds: float) -> bool:
        now = await self._now("claim_notice")
        key = (target, NoticeKind(kind).value, provider)
        sent = self._notices.get(key)
        if sent is not None and sent > now - float(interval_seconds):
            return False
        self._notices[key] = now
        return True

    async def close(self) -> None:
        self._closed = True


def _micros(epoch: float) -> int:
    """A time as the cursor's exact key: integer microseconds since the epoch."""
    return round(epoch * 1_000_000)
