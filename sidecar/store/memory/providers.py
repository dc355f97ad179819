"""The memory store's provider-state verbs: the pure transitions of ``core.breaker`` applied
to a dict, each after the verb's one await (so each is atomic, as its SQL statement is)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from sidecar.core import breaker
from sidecar.core.breaker import BreakerPolicy, ProbeEnd, ProviderState
from sidecar.store.memory.tables import Tables


class ProviderStateVerbs(Tables):
    def _provider_rows(self) -> dict[str, ProviderState]:
        return self._provider_state_rows

    async def _change(self, what: str, provider: str,
                      change: Callable[[ProviderState, float], ProviderState | None]
                      ) -> ProviderState | None:
        now = await self._now(what)
        rows = self._provider_rows()
        after = change(rows.get(provider, ProviderState(provider)), now)
        if after is None:
            return None
        rows[provider] = dataclasses.replace(after, now=now)
        return rows[provider]

    async def provider_states(self) -> list[ProviderState]:
        now = await self._now("provider_states")
        return [dataclasses.replace(s, now=now)
                for _, s in sorted(self._provider_rows().items())]

    async def pause_provider(self, provider: str, by: str, reason: str) -> ProviderState | None:
        return await self._change("pause_provider", provider,
                                  lambda s, now: breaker.pause(s, now, by, reason))

    async def resume_provider(self, provider: str) -> ProviderState | None:
        return await self._change("resume_provider", provider, breaker.resume)

    async def breaker_failure(self, provider: str, policy: BreakerPolicy,
                              why: str) -> ProviderState | None:
        return await self._change("breaker_failure", provider,
                                  lambda s, now: breaker.count_failure(s, now, policy, why))

    async def take_probe(self, provider: str, owner: str,
                         lease_seconds: float) -> ProviderState | None:
        return await self._change("take_probe", provider,
                                  lambda s, now: breaker.take_probe(s, now, owner, lease_seconds))

    async def end_probe(self, provider: str, owner: str, end: ProbeEnd, cooldown: float,
                        why: str) -> ProviderState | None:
        return await self._change(
            "end_probe", provider,
            lambda s, now: breaker.end_probe(s, now, owner, end, cooldown, why))
