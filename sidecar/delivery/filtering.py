"""The provider's filter on the delivery path: which items it drops (``core.filtering.judge``),
and the recording of a dropped event — claimed like any other, then written ``done`` with
outcome ``filtered`` and the 200 it is answered, so its duplicates are answered alike.

    admit ─ judge each item ─┬─ kept: the mode's way (forwarded, or queued)
                             └─ dropped: claim ─ record filtered (done, 200) ─ answer 200

Forward mode records the dropped items it owns after its claims (``ForwardMode``); queue mode
claims a dropped event instead of queueing it (``accept_dropped``)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from sidecar.config.model import ProviderConfig
from sidecar.core.answers import Answer, filtered
from sidecar.core.body import Body, NotJson
from sidecar.core.events import AttemptResult, EventState, Outcome, RecordedResponse
from sidecar.core.filtering import NOT_JSON, NotRead, judge, read_event_type
from sidecar.core.known import KnownAnswers
from sidecar.core.ports import DeliveryStore
from sidecar.delivery.context import Delivery
from sidecar.delivery.steps import Steps


def admitted_destinations(delivery: Delivery) -> tuple[str, ...]:
    """Fan-out: the names of the provider's destinations whose filters keep the event (all
    of those without one), noted on its log line when any drops it."""
    provider = delivery.provider
    names = destinations_admitting(provider, delivery.body, delivery.inbound.headers)
    if len(names) < len(provider.routes):
        delivery.trace.fields["destinations"] = len(names)
    return names


def destinations_admitting(provider: ProviderConfig, body: Body,
                           headers: Mapping[str, str]) -> tuple[str, ...]:
    """The names of ``provider``'s destinations whose filters keep the event (all of those
    without one)."""
    document: object | NotRead | None = None
    event_type: str | None = None
    names: list[str] = []
    for destination in provider.destinations:
        if destination.filter is not None:
            if document is None:
                try:
                    document = body.json()
                except NotJson:
                    document = NOT_JSON
                if provider.event_type is not None:
                    event_type = read_event_type(provider.event_type, document, headers)
            if not judge(destination.filter, event_type, document).keep:
                continue
        names.append(destination.name)
    return tuple(names)


def filtered_result(answer: Answer) -> AttemptResult:
    """What a dropped event's row records: done, outcome filtered, the answer it was given."""
    return AttemptResult(EventState.DONE, Outcome.FILTERED,
                         RecordedResponse(answer.status, answer.headers, answer.body), 0.0)


class Filters:
    def __init__(self, steps: Steps, *, store: DeliveryStore, known: KnownAnswers,
                 owner: str) -> None:
        self._steps = steps
        self._store = store
        self._known = known
        self._owner = owner

    @staticmethod
    def judge(delivery: Delivery) -> Delivery:
        """The delivery with the positions of the items its provider's filter drops (each
        item judged alone: a batch item by its own JSON). Noted on its log line."""
        provider = delivery.provider
        spec = provider.filter
        if spec is None:
            return delivery
        document: object | NotRead
        try:
            document = delivery.body.json()
        except NotJson:
            document = NOT_JSON
        batch = provider.event_id.is_batch
        dropped: set[int] = set()
        for item in delivery.items:
            seen = item.value if batch else document
            event_type = (read_event_type(provider.event_type, seen, delivery.inbound.headers)
                          if provider.event_type is not None else None)
            verdict = judge(spec, event_type, seen)
            if not verdict.keep:
                dropped.add(item.position)
            if not batch:
                fields = delivery.trace.fields
                fields["filter"] = verdict.why.value
                if verdict.rule is not None:
                    fields["filter_rule"] = verdict.rule
        if batch:
            delivery.trace.fields["batch_filtered"] = len(dropped)
        return delivery.with_dropped(frozenset(dropped)) if dropped else delivery

    async def record(self, delivery: Delivery, owned: Sequence[tuple[str, int]],
                     answer: Answer) -> bool:
        """Record the dropped events this delivery claimed (``(event_id, attempt)``) as
        filtered, fenced by attempt; whether every write landed (False: another delivery had
        taken one over meanwhile; its own answer stands there)."""
        result = filtered_result(answer)
        written = await asyncio.gather(*(
            self._store.complete(delivery.key, event_id, attempt, result)
            for event_id, attempt in owned))
        return all(written)

    async def accept_dropped(self, delivery: Delivery) -> Answer | None:
        """Queue mode: a dropped event is not queued. Claimed and recorded filtered at once,
        answered as accepted (marked filtered). None: the event is known already (claim
        lost): queue mode answers it as it answers any redelivery."""
        provider = delivery.provider
        event_id = delivery.items[0].event_id
        if self._known.accepted(provider.key, event_id) is not None:
            return None
        asked = self._known.now()
        claim = await self._steps.claimed(delivery, self._store.claim(
            provider.key, event_id, delivery.body.sha256, provider.lease, self._owner, None))
        if not claim.won:
            return None
        answer = filtered(event_id, queued=True)
        # If this write fails (503), the row is left processing: after its lease the
        # provider's retry takes it over in forward mode's way (``finishes_in_forward_mode``)
        # and drops it again.
        await self.record(delivery, [(event_id, 1)], answer)
        self._known.remember_accepted(provider.key, event_id, delivery.body.sha256,
                                      self._known.until(asked, provider.retention, claim.row))
        delivery.trace.attempt = 1
        return answer
