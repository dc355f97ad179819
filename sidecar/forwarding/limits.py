"""Queue mode under ``delivery.rate`` and ``delivery.concurrency``: before a worker takes
events it reserves permits and tokens in the store, shared with every process; it takes no
more events than it reserved, gives back what it did not use, and each event's permit is
released once its try has settled. A worker that gets nothing waits for its turn: no event is
taken, so no attempt is spent and nothing goes dead because of a limit.

    reserve(want): tokens (rate) and a permit each (concurrency), whichever bound last asked
                   first ─ what the other does not match given back
    after the take: give back the unused; each forward: holding(permit) … release
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Final

from sidecar.config.model import ProviderConfig
from sidecar.core.errors import StoreError
from sidecar.core.limits import (
    Limit,
    Permit,
    RateLimit,
    allowance,
    next_token_in,
    permit_retry,
    rate_limit,
)
from sidecar.core.ports import LimitStore
from sidecar.obs.logs import get_logger
from sidecar.obs.metrics import Metrics

log = get_logger("sidecar.queue")

STORE_RETRY_PAUSE: Final = 1.0  # after a failed reservation (the store logs outages)


@dataclass(frozen=True, slots=True)
class Reserved:
    """What a worker may take now: ``count`` events, one ``permits`` each (when the provider
    has a concurrency). With nothing reserved, ``wait`` is how long to wait before asking
    again, and ``wakeable`` whether a wake-up of the worker (a freed slot here) may end the
    wait sooner."""

    count: int
    permits: tuple[Permit, ...] = ()
    tokens: int = 0
    wait: float = 0.0
    wakeable: bool = True


class ProviderLimits:
    """One provider's limits as one worker obeys them. A provider without ``delivery.rate``
    or ``delivery.concurrency`` pays nothing: ``reserve`` answers at once, no statement."""

    def __init__(self, provider: ProviderConfig, store: LimitStore, metrics: Metrics,
                 owner: str) -> None:
        self._key = provider.key
        self._lease = provider.lease
        self._store = store
        self._metrics = metrics
        self._owner = owner
        self._rate: RateLimit | None = rate_limit(provider.delivery.rate,
                                                  provider.delivery.burst)
        self._concurrency = provider.delivery.concurrency
        self._permit_waits = 0  # reservations in a row that found every slot held
        self._permits_bind = False  # the concurrency held the last reservation back

    @property
    def active(self) -> bool:
        return self._rate is not None or self._concurrency is not None

    async def reserve(self, want: int) -> Reserved:
        """Tokens and a permit for each of up to ``want`` events. The limit that held the
        last reservation back is asked first, so a worker waiting for its turn costs one
        statement a look: tokens while the rate binds, permits while the concurrency does.
        What the other limit does not match goes back at once."""
        if not self.active or want <= 0:
            return Reserved(want)
        tokens: int | None = None
        permits: list[Permit] | None = None
        try:
            if self._concurrency is not None and (self._rate is None or self._permits_bind):
                permits = await self._take_permits(want)
                if not permits:
                    return self._no_permit()
                if self._rate is not None:
                    took = await self._store.take_tokens(self._key, len(permits), self._rate)
                    tokens = took.granted
                    if tokens == 0:
                        await self._release(permits)
                        return self._no_token(took.left)
            else:
                if self._rate is not None:
                    took = await self._store.take_tokens(self._key, want, self._rate)
                    tokens = took.granted
                    if tokens == 0:
                        return self._no_token(took.left)
                if self._concurrency is not None:
                    permits = await self._take_permits(tokens if tokens is not None else want)
                    if not permits:
                        await self._give_back_tokens(tokens or 0)
                        return self._no_permit()
        except StoreError as exc:
            log.warning("delivery_limit_failed", provider=self._key, error=str(exc))
            await self._give_back_tokens(tokens or 0)
            if permits:
                await self._release(permits)
            return Reserved(0, wait=STORE_RETRY_PAUSE, wakeable=False)
        allowed = allowance(want, len(permits) if permits is not None else None, tokens)
        self._permits_bind = allowed.limited_by is Limit.CONCURRENCY
        if allowed.limited_by is not None:
            self._limited(allowed.limited_by)
        if tokens is not None and tokens > allowed.count:
            await self._give_back_tokens(tokens - allowed.count)
        if permits is not None and len(permits) > allowed.count:
            await self._release(permits[allowed.count:])
        self._permit_waits = 0
        return Reserved(allowed.count, tuple(permits[:allowed.count]) if permits else (),
                        allowed.count if tokens else 0)

    async def _take_permits(self, want: int) -> list[Permit]:
        assert self._concurrency is not None
        return await self._store.take_permits(self._key, want, self._concurrency, self._lease,
                                              self._owner)

    def _no_token(self, left: float) -> Reserved:
        """None granted: wait for the next token. Nothing here can make it come sooner."""
        assert self._rate is not None
        self._permits_bind = False
        self._limited(Limit.RATE)
        return Reserved(0, wait=max(next_token_in(left, self._rate), 0.001), wakeable=False)

    def _no_permit(self) -> Reserved:
        """Every slot held: wait until a release wakes the worker, or look again."""
        self._permits_bind = True
        self._permit_waits += 1
        self._limited(Limit.CONCURRENCY)
        return Reserved(0, wait=permit_retry(self._permit_waits), wakeable=True)

    async def unused(self, reserved: Reserved, taken: int) -> Sequence[Permit | None]:
        """After a take that fetched ``taken`` of ``reserved.count`` events: give back the
        permits and tokens of the events not found; the permit of each event taken, in
        order (None: no concurrency limit)."""
        if not self.active:
            return [None] * taken
        left = reserved.count - taken
        if left > 0:
            if reserved.permits:
                await self._release(reserved.permits[taken:])
            await self._give_back_tokens(min(left, reserved.tokens))
        if reserved.permits:
            return list(reserved.permits[:taken])
        return [None] * taken

    async def holding(self, permit: Permit | None, work: Awaitable[None]) -> None:
        """``work`` (a forward and its settle), then its permit released, however it ended."""
        try:
            await work
        finally:
            if permit is not None:
                await self._release([permit])

    async def _give_back_tokens(self, count: int) -> None:
        """Best effort: tokens not put back are lost for a moment (the bucket refills)."""
        if self._rate is None or count <= 0:
            return
        try:
            await self._store.return_tokens(self._key, count, self._rate)
        except StoreError as exc:
            log.warning("delivery_limit_failed", provider=self._key, error=str(exc))

    async def _release(self, permits: Sequence[Permit]) -> None:
        """Best effort: a permit not released is free again when its lease ends."""
        try:
            await self._store.release_permits(permits)
        except StoreError as exc:
            log.warning("delivery_permit_release_failed", provider=self._key,
                        error=str(exc), slots=[p.slot for p in permits])

    def _limited(self, limit: Limit) -> None:
        self._metrics.delivery_limited.labels(self._key, limit.value).inc()
