"""Whether a provider's deliveries may go ahead in this process: paused by an operator, or held
by its circuit breaker (``core.breaker``). Every process keeps the store's provider states in
memory, read again every ``REFRESH`` seconds by a background task, so that a delivery costs no
statement; a state changed in any replica is obeyed here within about a second.

Statements are made only at the edges: a failed attempt is counted (``breaker_failure``), the
one probe after the cooldown is taken (``take_probe``) and ended (``end_probe``). Each is
guarded in the database, so a transition is made by exactly one replica: that one logs it,
counts it and hands its notice over.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Final, assert_never

from sidecar.config.model import ProviderConfig
from sidecar.core.breaker import (
    Admitted,
    BreakerPolicy,
    BreakerState,
    Held,
    HoldReason,
    MayProbe,
    ProbeEnd,
    ProviderState,
    check_hold,
    policy_of,
)
from sidecar.core.errors import StoreError
from sidecar.core.notices import Notice, NoticeKind, Notices
from sidecar.core.ports import ProviderStateStore
from sidecar.obs.logs import get_logger
from sidecar.obs.metrics import Metrics

log = get_logger("sidecar.holds")

REFRESH: Final = 0.5  # seconds between reads of the provider states: obeyed within ~1 s
PROBE_TAKEN_RETRY: Final = 1.0  # another replica holds the probe: look again in a second
BREAKER_GAUGE: Final[Mapping[BreakerState, int]] = {
    BreakerState.CLOSED: 0, BreakerState.OPEN: 1, BreakerState.HALF_OPEN: 2}


def breaker_policy(provider: ProviderConfig) -> BreakerPolicy | None:
    breaker = provider.delivery.breaker
    return policy_of(breaker.failures, breaker.window, breaker.cooldown)


def opened_detail(state: ProviderState, policy: BreakerPolicy | None) -> dict[str, object]:
    """What an opened breaker's log line and notice say: when, why, until when."""
    detail: dict[str, object] = {"failures": state.failures, "last_failure": state.last_failure,
                                 "opened_at": state.opened_at, "open_until": state.open_until}
    if policy is not None:
        detail["window_s"] = policy.window
        detail["cooldown_s"] = policy.cooldown
    return detail


def announce(state: ProviderState, transition: str, notices: Notices,
             metrics: Metrics | None, policy: BreakerPolicy | None = None,
             **extra: object) -> None:
    """A transition this process's statement made: one log line with why, counted, and its
    notice handed over (once across replicas, since only one statement makes it)."""
    kind = {"paused": NoticeKind.PAUSED, "resumed": NoticeKind.RESUMED,
            "breaker_opened": NoticeKind.BREAKER_OPENED,
            "breaker_reopened": NoticeKind.BREAKER_OPENED,
            "breaker_closed": NoticeKind.BREAKER_CLOSED}[transition]
    detail: dict[str, object] = dict(extra)
    if transition in ("paused", "resumed") and state.paused is not None:
        detail.update(paused_at=state.paused.at, by=state.paused.by, reason=state.paused.reason)
    if transition in ("breaker_opened", "breaker_reopened"):
        detail.update(opened_detail(state, policy))
    log.warning("provider_" + transition, provider=state.provider, **detail)
    if metrics is not None:
        metrics.provider_transitions.labels(state.provider, transition).inc()
    notices.notice(Notice(kind, state.provider, detail))


class Holds:
    """This process's view of every provider's hold state, and its part in the breaker."""

    def __init__(self, providers: Sequence[ProviderConfig], store: ProviderStateStore,
                 notices: Notices, metrics: Metrics, owner: str, *,
                 clock: Callable[[], float] = time.time, refresh: float = REFRESH) -> None:
        self._policies = {p.key: breaker_policy(p) for p in providers}
        self._leases = {p.key: p.lease for p in providers}
        self._store = store
        self._notices = notices
        self._metrics = metrics
        self._owner = owner
        self._clock = clock
        self._refresh = refresh
        self._states: dict[str, ProviderState] = {}
        self._skew = 0.0  # database clock minus ours, as of the last read
        # providers whose probe this process is taking or has, until when (monotonic): a probe
        # whose end was never reported (a crash in the attempt) stops holding after its lease
        self._probing: dict[str, float] = {}

    # -- the cache --------------------------------------------------------------------------

    def state(self, provider: str) -> ProviderState:
        return self._states.get(provider) or ProviderState(provider)

    def now(self) -> float:
        """The database clock, estimated from the last read."""
        return self._clock() + self._skew

    async def read(self) -> None:
        """Read every provider's state now (raises ``StoreError``)."""
        states = await self._store.provider_states()
        if states:
            self._skew = states[0].now - self._clock()
        self._states = {s.provider: s for s in states}
        for key in self._policies:
            self._gauges(self.state(key))

    async def run(self) -> None:
        """Read the states every ``REFRESH`` seconds until cancelled; a failed read keeps the
        last states (a store outage does not lift a pause)."""
        failing = False
        while True:
            try:
                await self.read()
                if failing:
                    log.info("provider_states_read_again")
                failing = False
            except StoreError as exc:
                if not failing:
                    log.warning("provider_states_unread", error=str(exc))
                failing = True
            await asyncio.sleep(self._refresh)

    def _learn(self, state: ProviderState) -> None:
        """A state this process's own statement returned: newer than the cache's."""
        self._states[state.provider] = state
        self._gauges(state)

    def _gauges(self, state: ProviderState) -> None:
        self._metrics.provider_paused.labels(state.provider).set(
            0 if state.paused is None else 1)
        self._metrics.breaker_state.labels(state.provider).set(BREAKER_GAUGE[state.breaker])

    # -- deliveries -------------------------------------------------------------------------

    async def admit(self, provider: ProviderConfig) -> Admitted | Held:
        """Whether a delivery of ``provider`` may go ahead now: held, admitted, or admitted
        as the breaker's one probe (this call took it)."""
        key = provider.key
        verdict = check_hold(self.state(key), self.now(), self._policies.get(key))
        if isinstance(verdict, Held):
            return verdict
        if not isinstance(verdict, MayProbe):
            return Admitted()
        lease = self._leases.get(key, 30.0)
        if self._probing.get(key, 0.0) > time.monotonic():  # this process has the probe
            return Held(HoldReason.BREAKER_OPEN, PROBE_TAKEN_RETRY)
        self._probing[key] = time.monotonic() + lease
        token = f"{self._owner}#probe.{secrets.token_hex(4)}"
        try:
            taken = await self._store.take_probe(key, token, lease)
        except StoreError as exc:
            self._probing.pop(key, None)
            log.warning("breaker_probe_take_failed", provider=key, error=str(exc))
            return Held(HoldReason.BREAKER_OPEN, PROBE_TAKEN_RETRY)
        if taken is None:
            self._probing.pop(key, None)
            return Held(HoldReason.BREAKER_OPEN, PROBE_TAKEN_RETRY)
        self._learn(taken)
        log.info("breaker_probe", provider=key)
        return Admitted(probe=token)

    async def ended(self, provider: ProviderConfig, admitted: Admitted, end: ProbeEnd,
                    why: str) -> None:
        """How an admitted delivery's attempt ended for the breaker (``UNUSED``: no attempt
        was made). Counts a failure, or ends the probe; never raises."""
        key = provider.key
        policy = self._policies.get(key)
        try:
            if admitted.probe is not None:
                await self._end_probe(key, admitted.probe, end, why, policy)
            elif end is ProbeEnd.FAILED and policy is not None:
                counted = await self._store.breaker_failure(key, policy, why)
                if counted is None:  # another replica opened it: learn it now, not in 0.5 s
                    await self.read()
                else:
                    self._learn(counted)
                    if counted.breaker is BreakerState.OPEN:
                        announce(counted, "breaker_opened", self._notices, self._metrics,
                                 policy)
        except StoreError as exc:
            log.warning("breaker_write_failed", provider=key, error=str(exc))
        finally:
            if admitted.probe is not None:
                self._probing.pop(key, None)

    async def _end_probe(self, key: str, token: str, end: ProbeEnd, why: str,
                         policy: BreakerPolicy | None) -> None:
        cooldown = policy.cooldown if policy is not None else 0.0
        ended = await self._store.end_probe(key, token, end, cooldown, why)
        if ended is None:  # its lease ran out and another replica took the probe over
            return
        self._learn(ended)
        match end:
            case ProbeEnd.SUCCEEDED:
                announce(ended, "breaker_closed", self._notices, self._metrics)
            case ProbeEnd.FAILED:
                announce(ended, "breaker_reopened", self._notices, self._metrics, policy)
            case ProbeEnd.UNUSED:
                pass  # open again, due for another probe: nothing to announce
            case _:
                assert_never(end)
