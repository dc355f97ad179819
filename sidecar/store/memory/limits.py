"""The delivery limits of the memory store (``core.ports.LimitStore``): a bucket per provider
and the slots held, with the core's arithmetic. After ``_now``, no await."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from sidecar.core.limits import Permit, RateLimit, Tokens, granted, refilled
from sidecar.store.memory.tables import Tables

_takes = itertools.count(1)


class LimitVerbs(Tables):
    """``take_tokens``, ``return_tokens``, ``take_permits``, ``release_permits``."""

    async def take_tokens(self, provider: str, want: int, limit: RateLimit) -> Tokens:
        if want <= 0:
            raise ValueError(f"take_tokens of {provider}: want must be > 0, got {want}")
        now = await self._now("take_tokens")
        tokens, at = self._buckets.get(provider, (float(limit.burst), now))
        tokens = refilled(tokens, now - at, limit)
        taken = granted(tokens, want)
        self._buckets[provider] = (tokens - taken, now)
        return Tokens(taken, tokens - taken)

    async def return_tokens(self, provider: str, count: int, limit: RateLimit) -> None:
        if count <= 0:
            return
        await self._now("return_tokens")
        if provider in self._buckets:
            tokens, at = self._buckets[provider]
            self._buckets[provider] = (min(float(limit.burst), tokens + count), at)

    async def take_permits(self, provider: str, want: int, concurrency: int,
                           lease_seconds: float, owner: str) -> list[Permit]:
        if want <= 0:
            return []
        now = await self._now("take_permits")
        token = f"{owner}#m{next(_takes)}"
        taken: list[Permit] = []
        for slot in range(1, concurrency + 1):
            if len(taken) == want:
                break
            held = self._permits.get((provider, slot))
            if held is None or held[1] <= now:
                self._permits[(provider, slot)] = (token, now + float(lease_seconds))
                taken.append(Permit(provider, slot, token))
        return taken

    async def release_permits(self, permits: Sequence[Permit]) -> int:
        await self._now("release_permits")
        freed = 0
        for permit in permits:
            held = self._permits.get((permit.provider, permit.slot))
            if held is not None and held[0] == permit.owner:
                del self._permits[(permit.provider, permit.slot)]
                freed += 1
        return freed
