"""Fail-open (``store_outage: forward``): a verified delivery whose claim the store could not
answer is forwarded without one, marked ``X-Webhook-Sidecar-Unclaimed: true`` for the app, and
the app's answer relayed. Nothing is recorded and nothing deduplicated: a provider's retry of
it, or a copy in flight, reaches the app again. The filter still holds: dropped items are
answered 200 and not sent (nor recorded)."""

from __future__ import annotations

from sidecar.config.model import StoreOutage
from sidecar.core.answers import Answer, filtered, no_answer, unclaimed
from sidecar.core.batch import filtered_body
from sidecar.core.errors import RowLocked, StoreClosed, StoreError
from sidecar.core.events import StoredRequest
from sidecar.delivery.context import Delivery
from sidecar.delivery.ports import Forwarding, Observer
from sidecar.delivery.steps import Steps


def fails_open(delivery: Delivery, error: StoreError) -> bool:
    """Whether ``error`` at the claim sends ``delivery`` on without one: the provider asks for
    it, and the store is failing (not a held row, not a shutdown)."""
    return (delivery.provider.store_outage is StoreOutage.FORWARD
            and not isinstance(error, RowLocked | StoreClosed))


class UnclaimedForwards:
    def __init__(self, steps: Steps, *, forwarder: Forwarding, observer: Observer) -> None:
        self._steps = steps
        self._forwarder = forwarder
        self._observer = observer

    async def forward(self, delivery: Delivery, error: StoreError) -> Answer:
        provider, inbound, trace = delivery.provider, delivery.inbound, delivery.trace
        trace.fields["unclaimed"] = True
        trace.fields["error"] = str(error)
        kept = [item for item in delivery.items if item.position not in delivery.dropped]
        if not kept:
            return filtered(delivery.items[0].event_id)
        body = (filtered_body(provider.event_id, delivery.body, {i.position for i in kept},
                              delivery.items)
                if provider.event_id.is_batch else delivery.body.raw)
        ids = [item.event_id for item in kept]
        self._observer.unclaimed_forward(provider.key, tuple(ids), str(error))
        sent = await self._forwarder.send(
            provider, ids, 1,
            StoredRequest(inbound.method, inbound.path, self._steps.app_headers(inbound), body),
            unclaimed=True)
        trace.fields["upstream"] = provider.upstream.origin
        trace.fields["upstream_ms"] = round(sent.result.latency_ms, 2)
        if sent.error:
            trace.fields["upstream_error"] = sent.error
        if sent.response is None:
            return no_answer(sent.result.outcome)
        return unclaimed(sent.response)
