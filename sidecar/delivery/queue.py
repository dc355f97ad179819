"""Queue mode: store the event with its request in one statement and answer 200 at once; the
delivery workers (``sidecar.forwarding.queueworker``) forward it. A redelivery is answered the
same."""

from __future__ import annotations

import json
from collections.abc import Callable

from sidecar.config.model import ProviderConfig
from sidecar.core.answers import Answer, accepted, refuse
from sidecar.core.body import Body, NotJson
from sidecar.core.decision import finishes_in_forward_mode
from sidecar.core.events import StoredRequest
from sidecar.core.known import KnownAnswers
from sidecar.core.ports import DeliveryStore
from sidecar.core.tracing import Tracer
from sidecar.delivery.context import Delivery
from sidecar.delivery.filtering import admitted_destinations
from sidecar.delivery.steps import Steps


class QueueMode:
    def __init__(self, steps: Steps, *, store: DeliveryStore, known: KnownAnswers,
                 on_queued: Callable[[str], None], tracer: Tracer) -> None:
        self._steps = steps
        self._tracer = tracer
        self._store = store
        self._known = known
        self._on_queued = on_queued  # wakes this process's delivery workers of a provider

    async def accept(self, delivery: Delivery) -> Answer | None:
        """The answer: "accepted" (first or again), a full queue, or a payload mismatch. None:
        the event's row was written in forward mode (before the provider switched to queue)
        and is not done: forward mode's rules finish it
        (``core.decision.finishes_in_forward_mode``)."""
        provider, body = delivery.provider, delivery.body
        event_id = delivery.items[0].event_id  # not a batch provider (the loader refuses it)
        digest = body.sha256
        known = self._known.accepted(provider.key, event_id)
        if known is not None:
            delivery.trace.fields["known"] = True
            return self._accepted_again(delivery, event_id, known, digest)
        inbound = delivery.inbound
        # Tracing on: the accept's span context goes with the event, for the worker's link.
        traceparent = (self._tracer.headers().get("traceparent") if self._tracer.enabled
                       else None)
        request = StoredRequest(inbound.method, inbound.path,
                                self._steps.app_headers(inbound), body.raw, traceparent,
                                admitted_destinations(delivery) if provider.fans_out else None)
        asked = self._known.now()
        enqueued = await self._steps.claimed(delivery, self._store.enqueue(
            provider.key, event_id, digest, request, order_key=order_key_of(provider, body),
            max_depth=provider.queue.max_queue_depth), "enqueue")
        if enqueued.full:
            return refuse("queue_full", limit=provider.queue.max_queue_depth)
        if enqueued.accepted:
            self._known.remember_accepted(provider.key, event_id, digest,
                                          self._known.until(asked, provider.retention))
            self._on_queued(provider.key)
            return accepted(event_id, first=True)
        row = enqueued.row
        assert row is not None
        if finishes_in_forward_mode(row):
            return None
        self._known.remember_accepted(provider.key, event_id, row.body_sha256,
                                      self._known.until(asked, provider.retention, row))
        delivery.trace.attempt = row.attempt
        return self._accepted_again(delivery, event_id, row.body_sha256, digest)

    def _accepted_again(self, delivery: Delivery, event_id: str, stored: bytes,
                        digest: bytes) -> Answer:
        if self._steps.refuses_other_body(delivery, event_id, stored, digest):
            return refuse("payload_mismatch")
        return accepted(event_id, first=False)


def order_key_of(provider: ProviderConfig, body: Body) -> str | None:
    """The value of the provider's ``queue.order_key`` in the body, as text (a string as it
    is, anything else as JSON), or None: no key, no ordering."""
    path = provider.queue.order_key
    if path is None:
        return None
    try:
        found, value = path.lookup(body.json())
    except NotJson:
        return None
    if not found or value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)
