"""``Pipeline.deliver``: one request on a provider's route in, its answer out, through the
shared steps (``steps``) and the provider's mode (``forward``, ``queue``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from sidecar.config.model import Mode, ProviderConfig
from sidecar.core import phases
from sidecar.core.answers import Answer, refuse
from sidecar.core.body import Body
from sidecar.core.breaker import Held, ProbeEnd
from sidecar.core.errors import StoreError
from sidecar.core.forwarded import Network
from sidecar.core.known import KnownAnswers
from sidecar.core.ports import DeliveryStore
from sidecar.core.tracing import NO_TRACER, Tracer
from sidecar.delivery.context import Delivery, Inbound, Trace
from sidecar.delivery.filtering import Filters
from sidecar.delivery.forward import ForwardMode
from sidecar.delivery.held import attempt_end, held_answer
from sidecar.delivery.limits import RateLimiter
from sidecar.delivery.ports import Forwarding, Holds, Keys, NoHolds, Observer
from sidecar.delivery.queue import QueueMode
from sidecar.delivery.steps import Steps
from sidecar.delivery.unclaimed import UnclaimedForwards, fails_open


class Pipeline:
    """Built once at start-up; ``deliver`` is called once per request."""

    def __init__(self, *, store: DeliveryStore, forwarder: Forwarding, keyring: Keys, owner: str,
                 observer: Observer, clock: Callable[[], float] = time.time,
                 trusted_proxies: Sequence[Network] = (),
                 known: KnownAnswers | None = None,
                 on_queued: Callable[[str], None] = lambda provider: None,
                 tracer: Tracer = NO_TRACER, holds: Holds | None = None) -> None:
        # Done events and replay-guard bindings this process has seen (``core.known``).
        known = known if known is not None else KnownAnswers(0)
        self._steps = Steps(store=store, keyring=keyring, known=known, observer=observer,
                            clock=clock, trusted_proxies=trusted_proxies, tracer=tracer)
        self._filters = Filters(self._steps, store=store, known=known, owner=owner)
        self._forward = ForwardMode(self._steps, store=store, forwarder=forwarder, known=known,
                                    owner=owner, clock=clock,
                                    rate=RateLimiter(store, known, observer),
                                    filters=self._filters)
        self._unclaimed = UnclaimedForwards(self._steps, forwarder=forwarder,
                                            observer=observer)
        self._store = store
        self._known = known
        self._holds: Holds = holds if holds is not None else NoHolds()
        self._queue = QueueMode(self._steps, store=store, known=known, on_queued=on_queued,
                                tracer=tracer)

    async def deliver(self, provider: ProviderConfig, inbound: Inbound) -> Answer:
        trace = Trace()
        try:
            answer = await self._deliver(Delivery(provider, inbound, Body(inbound.body), trace))
        except StoreError as exc:
            trace.fields["error"] = str(exc)
            answer = refuse("store_error")
        except Exception as exc:  # a bug: answered 500, logged with its traceback, counted
            trace.fields["exc_info"] = exc
            answer = refuse("internal_error")
        return trace.finish(answer)

    async def _deliver(self, delivery: Delivery) -> Answer:
        admitted = await self._steps.admit(delivery)
        phases.mark("verify")
        if isinstance(admitted, Answer):
            return admitted
        admitted = self._filters.judge(admitted)
        if admitted.provider.mode is Mode.QUEUE:
            # The enqueue does not carry the replay guard: bound alone first.
            checked = await self._steps.bind_guard(admitted)
            if isinstance(checked, Answer):
                return checked
            answer = (await self._filters.accept_dropped(checked) if checked.dropped
                      else None) or await self._queue.accept(checked)
            if answer is not None:
                return answer
            # The event was first seen in forward mode: it finishes in forward mode.
            return await self._forward.deliver(checked)
        return await self._forward_unless_held(admitted)

    async def _forward_unless_held(self, delivery: Delivery) -> Answer:
        """Forward mode behind the provider's hold (paused, breaker): held, 503 (duplicates
        of done events still answered from their rows); else forwarded, and how its attempt
        ended told to the breaker."""
        admission = await self._holds.admit(delivery.provider)
        if isinstance(admission, Held):
            return await held_answer(delivery, admission, self._store, self._known)
        try:
            answer = await self._forward_or_fail_open(delivery)
        except BaseException as exc:
            if admission.probe is not None:  # no attempt made (the store failed): give it back
                await self._holds.ended(delivery.provider, admission, ProbeEnd.UNUSED, "")
            raise exc  # named: compiled, a bare raise after an await loses it (a crash)
        await self._holds.ended(delivery.provider, admission, *attempt_end(answer))
        return answer

    async def _forward_or_fail_open(self, delivery: Delivery) -> Answer:
        """Forward mode; with ``store_outage: forward``, a delivery whose claim the store could
        not make is forwarded unclaimed."""
        try:
            return await self._forward.deliver(delivery)
        except StoreError as exc:
            if not fails_open(delivery, exc):
                raise
            return await self._unclaimed.forward(delivery, exc)
