"""The delivery-limit verbs (``core.ports.LimitStore``), written once for both SQL adapters:
the token bucket of ``delivery.rate`` and the permits of ``delivery.concurrency``."""

from __future__ import annotations

import abc
import json
from collections.abc import Sequence

from sidecar.core.limits import Permit, RateLimit, Tokens
from sidecar.store.owners import call_owner
from sidecar.store.rows import Params, Record


class LimitVerbs(abc.ABC):
    @abc.abstractmethod
    async def _rows(self, name: str, params: Params) -> Sequence[Record]: ...


    async def take_tokens(self, provider: str, want: int, limit: RateLimit) -> Tokens:
        if want <= 0:
            raise ValueError(f"take_tokens of {provider}: want must be > 0, got {want}")
        [record] = await self._rows("take_tokens", {
            "provider": provider, "want": int(want), "burst": int(limit.burst),
            "per_second": float(limit.per_second)})
        return Tokens(int(record["taken"]), float(record["tokens"]))

    async def return_tokens(self, provider: str, count: int, limit: RateLimit) -> None:
        if count > 0:
            await self._rows("return_tokens", {"provider": provider, "count": int(count),
                                               "burst": int(limit.burst)})

    async def take_permits(self, provider: str, want: int, concurrency: int,
                           lease_seconds: float, owner: str) -> list[Permit]:
        if want <= 0:
            return []
        token = call_owner(owner)
        records = await self._rows("take_permits", {
            "provider": provider, "want": int(want), "concurrency": int(concurrency),
            "lease_seconds": float(lease_seconds), "owner": token})
        return [Permit(provider, int(r["slot"]), token) for r in records]

    async def release_permits(self, permits: Sequence[Permit]) -> int:
        freed = 0
        by_holder: dict[tuple[str, str], list[int]] = {}
        for permit in permits:
            by_holder.setdefault((permit.provider, permit.owner), []).append(permit.slot)
        for (provider, owner), slots in by_holder.items():
            freed += len(await self._rows("release_permits", {
                "provider": provider, "owner": owner, "slots": json.dumps(sorted(slots))}))
        return freed
