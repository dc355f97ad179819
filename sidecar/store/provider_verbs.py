"""The provider-state verbs (``core.ports.ProviderStateStore``), written once for both SQL
adapters: each is one guarded statement (``sql/<dialect>/<verb>.sql``) whose returned row says
that this call made the change."""

from __future__ import annotations

import abc
from collections.abc import Sequence

from sidecar.core.breaker import BreakerPolicy, ProbeEnd, ProviderState
from sidecar.store.rows import Params, Record, provider_state


class ProviderStateVerbs(abc.ABC):
    @abc.abstractmethod
    async def _rows(self, name: str, params: Params) -> Sequence[Record]: ...

    async def _one(self, name: str, params: Params) -> ProviderState | None:
        records = await self._rows(name, params)
        return provider_state(records[0]) if records else None

    async def provider_states(self) -> list[ProviderState]:
        return [provider_state(r) for r in await self._rows("provider_states", {})]

    async def pause_provider(self, provider: str, by: str, reason: str) -> ProviderState | None:
        return await self._one("pause_provider",
                               {"provider": provider, "by": by, "reason": reason})

    async def resume_provider(self, provider: str) -> ProviderState | None:
        return await self._one("resume_provider", {"provider": provider})

    async def breaker_failure(self, provider: str, policy: BreakerPolicy,
                              why: str) -> ProviderState | None:
        return await self._one("breaker_failure", {
            "provider": provider, "why": why, "threshold": policy.failures,
            "window": float(policy.window), "cooldown": float(policy.cooldown)})

    async def take_probe(self, provider: str, owner: str,
                         lease_seconds: float) -> ProviderState | None:
        return await self._one("take_probe", {"provider": provider, "owner": owner,
                                              "lease": float(lease_seconds)})

    async def end_probe(self, provider: str, owner: str, end: ProbeEnd, cooldown: float,
                        why: str) -> ProviderState | None:
        return await self._one("end_probe", {
            "provider": provider, "owner": owner, "end": end.value,
            "cooldown": float(cooldown), "why": why})
