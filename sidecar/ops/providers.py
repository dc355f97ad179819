"""Operator actions on providers, shared by the CLI (``providers``), the admin API and the
inspector: see each provider's hold state (paused, its circuit breaker), pause and resume.

A pause is one guarded statement in the store; every replica obeys it within about a second
(``forwarding.holds``) and it outlives restarts. In queue mode a paused provider's events are
still accepted and wait; in forward mode its deliveries are answered 503 + Retry-After, which
relies on the provider retrying: a provider that does not retry (``retries: false``, e.g.
GitHub) is paused in forward mode only when forced, since it would drop those deliveries."""

from __future__ import annotations

from typing import Any

from sidecar.config.model import Config, Mode, ProviderConfig
from sidecar.core.breaker import BreakerState, ProviderState
from sidecar.core.errors import OperationError
from sidecar.core.limits import rate_limit
from sidecar.core.notices import Notices
from sidecar.core.ports import ProviderStateStore
from sidecar.forwarding.holds import announce, breaker_policy
from sidecar.obs.metrics import Metrics
from sidecar.ops.describe import iso
from sidecar.ops.routes import find_route

MAX_REASON = 500  # characters of a pause's reason kept


def provider_config(config: Config, name: str,
                    destination: str | None = None) -> ProviderConfig:
    """The configured provider ``name`` (or destination, ``stripe.billing``, or ``name``'s
    ``destination``), or a 404 naming the known ones."""
    return find_route(config, name, destination or None)


def _iso(epoch: float | None) -> str | None:
    return iso(epoch) if epoch is not None else None


def describe(provider: ProviderConfig, state: ProviderState) -> dict[str, Any]:
    """One provider's hold state as JSON-ready values (times: epoch seconds of the database
    clock, and ISO-8601 UTC as ``*_iso``). Fields are only ever added."""
    policy = breaker_policy(provider)
    paused = state.paused
    breaker: dict[str, Any] = {
        "enabled": policy is not None,
        "state": state.breaker.value if policy is not None else BreakerState.CLOSED.value,
        "failures": state.failures,
        "last_failure": state.last_failure,
        "opened_at": state.opened_at, "opened_at_iso": _iso(state.opened_at),
        "open_until": state.open_until, "open_until_iso": _iso(state.open_until),
    }
    if policy is not None:
        breaker.update(threshold=policy.failures, window_s=policy.window,
                       cooldown_s=policy.cooldown)
    held = paused is not None or (policy is not None and state.breaker is not BreakerState.CLOSED)
    return {
        "provider": provider.key,
        "mode": provider.mode.value,
        "retries": provider.retries,
        "delivering": not held,
        "paused": paused is not None,
        "paused_at": paused.at if paused else None,
        "paused_at_iso": _iso(paused.at) if paused else None,
        "paused_by": paused.by if paused else None,
        "pause_reason": paused.reason if paused else None,
        "breaker": breaker,
        "limits": limits(provider),
    }


def limits(provider: ProviderConfig) -> dict[str, Any]:
    """The provider's ``delivery`` limits as configured (``burst``: the bucket's size, its
    default filled in); None where a limit is not set."""
    delivery = provider.delivery
    bucket = rate_limit(delivery.rate, delivery.burst)
    return {"rate": None if delivery.rate is None else str(delivery.rate),
            "burst": None if bucket is None else bucket.burst,
            "concurrency": delivery.concurrency}


async def status(config: Config, store: ProviderStateStore,
                 name: str | None = None) -> list[dict[str, Any]]:
    """Every configured provider's state (or ``name``'s), read from the store now."""
    wanted = [provider_config(config, name)] if name is not None else list(config.routes)
    states = {s.provider: s for s in await store.provider_states()}
    return [describe(p, states.get(p.key) or ProviderState(p.key)) for p in wanted]


def refuses_pause(provider: ProviderConfig) -> str | None:
    """Why pausing ``provider`` needs force, or None: in forward mode its deliveries are
    answered 503, and a provider that does not retry drops them."""
    if provider.mode is Mode.FORWARD and not provider.retries:
        return (f"{provider.key} does not retry failed deliveries: while paused (forward mode) "
                "its deliveries are answered 503 and the provider drops them for good; pause "
                "anyway with force (CLI --force, API \"force\": true), or use queue mode, which "
                "keeps accepting while paused")
    return None


async def pause(config: Config, store: ProviderStateStore, notices: Notices, name: str, *,
                by: str, reason: str = "", force: bool = False,
                metrics: Metrics | None = None) -> dict[str, Any]:
    """Pause ``name``'s deliveries in every replica. 404: unknown; 409: it does not retry and
    ``force`` was not given. Pausing a paused provider changes nothing (``changed`` false)."""
    provider = provider_config(config, name)
    refusal = refuses_pause(provider)
    if refusal is not None and not force:
        raise OperationError(409, refusal)
    made = await store.pause_provider(provider.key, by[:MAX_REASON], reason[:MAX_REASON])
    if made is not None:
        announce(made, "paused", notices, metrics)
    [shown] = await status(config, store, provider.key)
    return {**shown, "changed": made is not None}


async def resume(config: Config, store: ProviderStateStore, notices: Notices, name: str, *,
                 by: str, metrics: Metrics | None = None) -> dict[str, Any]:
    """Resume ``name``'s deliveries in every replica; resuming a running one changes nothing."""
    provider = provider_config(config, name)
    before = {s.provider: s for s in await store.provider_states()}.get(provider.key)
    made = await store.resume_provider(provider.key)
    if made is not None:
        paused = before.paused if before is not None else None
        announce(made, "resumed", notices, metrics, by=by,
                 paused_since=paused.at if paused is not None else None)
    [shown] = await status(config, store, provider.key)
    return {**shown, "changed": made is not None}
