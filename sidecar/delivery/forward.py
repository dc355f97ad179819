"""Forward mode: claim each event id of the delivery; forward the items this delivery owns once,
and answer the others from their rows (``core.decision.decide``); combine the answers.

    claim each ─┬─ won, or taken over: ours ──── forward once, record on each row ─┬─ batch_answer
                └─ another delivery's: decide … until the row answers ─────────────┘
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sidecar.core.answers import (
    Answer,
    Result,
    filtered,
    mirrored,
    no_answer,
    refuse,
    relayed,
    replayed,
)
from sidecar.core.batch import batch_answer, claim_digest, filtered_body
from sidecar.core.decision import (
    AnswerRecorded,
    Busy,
    MirrorFailure,
    QueueOwned,
    TakeOver,
    Wait,
    decide,
    status_class,
)
from sidecar.core.errors import RowLocked, StoreError
from sidecar.core.eventid import BatchItem
from sidecar.core.events import (
    AttemptResult,
    Claim,
    EventRow,
    EventState,
    Forwarded,
    Guard,
    Outcome,
    Recorded,
    StoredRequest,
)
from sidecar.core.known import KnownAnswers
from sidecar.core.ports import DeliveryStore
from sidecar.delivery.context import Delivery, Trace
from sidecar.delivery.filtering import Filters, filtered_result
from sidecar.delivery.limits import RateLimiter
from sidecar.delivery.ports import Forwarding
from sidecar.delivery.steps import Steps

MAX_DECISION_STEPS = 1000  # a safety bound; every step waits, answers or makes progress

Headers = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class _Ours:
    """This delivery owns an attempt at the event: it forwards it."""

    item: BatchItem
    attempt: int
    result: Result  # NEW or TAKEOVER
    digest: bytes  # the body hash the row holds: this delivery's, or a taken-over row's
    until: float  # if it ends done: when retention deletes the row (``KnownAnswers.until``)


@dataclass(frozen=True, slots=True)
class _Settled:
    """Another delivery's row answers for the event."""

    answer: Answer
    attempt: int


class ForwardMode:
    def __init__(self, steps: Steps, *, store: DeliveryStore, forwarder: Forwarding,
                 known: KnownAnswers, owner: str, clock: Callable[[], float],
                 rate: RateLimiter, filters: Filters) -> None:
        self._steps = steps
        self._rate = rate
        self._filters = filters
        self._store = store
        self._forwarder = forwarder
        self._known = known
        self._owner = owner
        self._clock = clock

    async def deliver(self, delivery: Delivery) -> Answer:
        if delivery.guard is not None and not self._claim_carries_guard(delivery):
            checked = await self._steps.bind_guard(delivery)
            if isinstance(checked, Answer):
                return checked
            delivery = checked
        inbound, trace = delivery.inbound, delivery.trace
        # What the app gets and a re-drive replays: computed once, and only when needed.
        app_headers = (self._steps.app_headers(inbound) if delivery.provider.store_payload
                       else None)
        spent = await self._rate.admit(delivery)  # delivery.rate: a token, or 429
        if isinstance(spent, Answer):
            return spent
        claimed = await self._claim_all(delivery, app_headers)
        if isinstance(claimed, Answer):  # the replay guard refused at the claim
            if spent is not None:
                await self._rate.unspent(delivery, spent)  # not forwarded: no token spent
            return claimed
        ours, settled = claimed
        if delivery.dropped:  # the filter's: recorded, answered 200, never forwarded
            ours, dropped = _split(ours, delivery.dropped)
            settled += await self._record_filtered(delivery, dropped, ours)
        if spent is not None and not ours:
            await self._rate.unspent(delivery, spent)  # nothing forwarded: no token spent
        if delivery.provider.event_id.is_batch:
            trace.fields["batch_forwarded"] = len(ours)
        forwarded: Answer | None = None
        if ours:
            if app_headers is None:
                app_headers = self._steps.app_headers(inbound)
            forwarded = await self._forward(delivery, ours, app_headers)
        else:
            trace.attempt = settled[0].attempt
        return batch_answer(forwarded, [s.answer for s in settled])

    async def _record_filtered(self, delivery: Delivery, dropped: Sequence[_Ours],
                               kept: Sequence[_Ours]) -> list[_Settled]:
        """The dropped events this delivery owns, recorded as filtered (``delivery.filtering``)
        and answered so; remembered as done like a forwarded event's rows. If the store fails,
        the ``kept`` ones are freed for the retry as after a failed claim (``_abandon``)."""
        if not dropped:
            return []
        answers = [filtered(o.item.event_id) for o in dropped]
        # One recorded answer per event: each names its own id.
        try:
            written = await asyncio.gather(*(
                self._filters.record(delivery, [(o.item.event_id, o.attempt)], answer)
                for o, answer in zip(dropped, answers, strict=True)))
        except StoreError as exc:
            await self._abandon(delivery, kept)
            raise exc  # not a bare raise: see _claim_all
        for o, answer, landed in zip(dropped, answers, written, strict=True):
            if landed:
                self._remember_done(delivery, [o], filtered_result(answer))
        delivery.trace.attempt = dropped[0].attempt
        return [_Settled(answer, o.attempt) for o, answer in zip(dropped, answers, strict=True)]

    def _claim_carries_guard(self, delivery: Delivery) -> bool:
        """Whether the replay guard's binding rides in the claim's statement: one event, whose
        claim comes first. A batch binds its items' ids alone, before its claims; an event
        known done is answered without a claim, after the binding alone."""
        items = delivery.items
        return (len(items) == 1 and not delivery.provider.event_id.is_batch
                and self._known.done(delivery.key, items[0].event_id) is None)

    async def _claim_all(self, delivery: Delivery, app_headers: Headers | None
                         ) -> tuple[list[_Ours], list[_Settled]] | Answer:
        """Claim every event of the delivery. If the store fails midway, the attempts already
        claimed are marked failed before the error goes on, so the provider's retry takes them
        over at once instead of after the lease. An answer: the replay guard, carried by the
        claim, refused the body (nothing was claimed)."""
        inbound = delivery.inbound
        deadline = asyncio.get_running_loop().time() + delivery.provider.inflight_wait
        payload = (StoredRequest(inbound.method, inbound.path, app_headers, delivery.body.raw)
                   if app_headers is not None else None)
        ours: list[_Ours] = []
        settled: list[_Settled] = []
        try:
            for item in delivery.items:
                resolved = await self._resolve(delivery, item, payload, deadline)
                if isinstance(resolved, Answer):
                    return resolved
                if isinstance(resolved, _Ours):
                    ours.append(resolved)
                else:
                    settled.append(resolved)
        except StoreError as exc:
            await self._abandon(delivery, ours)
            # Named, not a bare raise: compiled by mypyc, a bare raise after an await in an
            # except block loses the exception (a crash).
            raise exc
        return ours, settled

    async def _resolve(self, delivery: Delivery, item: BatchItem,
                       payload: StoredRequest | None, deadline: float
                       ) -> _Ours | _Settled | Answer:
        """Claim one event id and, when another delivery has it, follow the core's decisions
        until this delivery owns an attempt or knows the answer. Waits at most until
        ``deadline`` (loop time). The delivery's replay guard, if still to be bound, rides in
        the first claim: an ``Answer`` is its refusal."""
        loop = asyncio.get_running_loop()
        provider, event_id = delivery.provider, item.event_id
        digest = claim_digest(provider.event_id, delivery.body, item)
        known = self._known.done(provider.key, event_id)
        if known is not None:
            # Answered without the database, as its done row would be (``decide``:
            # AnswerRecorded). Nothing is learned, so nothing is remembered anew: the entry's
            # end stays where it was fixed when the fact was first learned.
            delivery.trace.fields["known"] = True
            if self._steps.refuses_other_body(delivery, event_id, known.row.body_sha256, digest):
                return _Settled(refuse("payload_mismatch"), known.row.attempt)
            return _Settled(known.answer, known.row.attempt)  # ``_recorded``, made once

        # ``asked``: the memory's clock before the store call that read ``row``, which dates
        # what the memory learns from it (``KnownAnswers.until``).
        asked = self._known.now()
        if delivery.guard is not None:
            guarded = await self._claim_guarded(delivery, delivery.guard, event_id, digest,
                                                payload, asked)
            if guarded is None:
                return refuse("replayed_body")
            claim = guarded
        else:
            claim = await self._claim(delivery, event_id, digest, payload)
        if claim.won:
            return _Ours(item, 1, Result.NEW, digest,
                         self._known.until(asked, provider.retention, claim.row))
        if self._steps.refuses_other_body(delivery, event_id, claim.row.body_sha256, digest):
            return _Settled(refuse("payload_mismatch"), claim.row.attempt)
        row: EventRow | None = claim.row

        waits = 0
        for _ in range(MAX_DECISION_STEPS):
            if row is None:  # deleted meanwhile (operator or retention): claim afresh
                asked = self._known.now()
                claim = await self._claim(delivery, event_id, digest, payload)
                if claim.won:
                    return _Ours(item, 1, Result.NEW, digest,
                                 self._known.until(asked, provider.retention, claim.row))
                row = claim.row
            match decide(row, waits=waits, wait_left=deadline - loop.time()):
                case AnswerRecorded(recorded):
                    self._known.remember_done(
                        recorded, self._known.until(asked, provider.retention, recorded))
                    return _recorded(recorded)
                case TakeOver():
                    # A take-over keeps the row's first receipt and body hash: so does its
                    # answer's memory.
                    until = self._known.until(asked, provider.retention, row)
                    try:
                        attempt = await self._store.take_over(provider.key, event_id,
                                                              provider.lease, self._owner)
                    except RowLocked:  # another session holds the row: as good as in flight
                        return _Settled(refuse("in_flight", "row_locked", lease=1), row.attempt)
                    if attempt is not None:
                        return _Ours(item, attempt, Result.TAKEOVER, row.body_sha256, until)
                    asked = self._known.now()  # another delivery took it: read it again
                    row = await self._store.get(provider.key, event_id)
                case Wait(pause):
                    await asyncio.sleep(pause)
                    waits += 1
                    asked = self._known.now()
                    row = await self._store.get(provider.key, event_id)
                case Busy(retry_after):
                    return _Settled(refuse("in_flight", lease=retry_after), row.attempt)
                case MirrorFailure(failed):
                    return _Settled(mirrored(failed.outcome, failed.response), failed.attempt)
                case QueueOwned(retry_after):
                    return _Settled(refuse("in_flight", "queued", lease=retry_after),
                                    row.attempt)
        raise StoreError("event row kept changing; giving up this delivery")

    async def _claim(self, delivery: Delivery, event_id: str, digest: bytes,
                     payload: StoredRequest | None) -> Claim:
        """The claim: won (this delivery inserted the row), or the row another one holds."""
        provider = delivery.provider
        return await self._steps.claimed(delivery, self._store.claim(
            provider.key, event_id, digest, provider.lease, self._owner, payload))

    async def _claim_guarded(self, delivery: Delivery, guard: Guard, event_id: str,
                             digest: bytes, payload: StoredRequest | None,
                             asked: float) -> Claim | None:
        """The claim with the replay guard's binding in its statement (``claim_guarded``),
        the binding remembered; None: the guard refused the body, nothing was claimed."""
        provider = delivery.provider
        answer = await self._steps.claimed(delivery, self._store.claim_guarded(
            provider.key, event_id, digest, provider.lease, self._owner, guard, payload))
        if answer.binding is None:  # a guarded claim always answers its binding
            raise StoreError(f"claim of {provider.key}:{event_id} answered no guard binding")
        if self._steps.replayed(delivery, guard, asked, answer.binding):
            return None
        return answer if isinstance(answer, Claim) else None

    async def _forward(self, delivery: Delivery, ours: Sequence[_Ours],
                       app_headers: Headers) -> Answer:
        provider, inbound, body = delivery.provider, delivery.inbound, delivery.body
        if provider.event_id.is_batch:
            body_bytes = filtered_body(provider.event_id, body, {o.item.position for o in ours},
                                       delivery.items)
        else:
            body_bytes = body.raw
        done = await self._forwarder.forward(
            provider, [(o.item.event_id, o.attempt) for o in ours],
            StoredRequest(inbound.method, inbound.path, app_headers, body_bytes))
        _note(delivery.trace, done, provider.upstream.origin)
        if done.response is None:
            return no_answer(done.result.outcome)
        if done.result.state is EventState.DONE and done.recorded is Recorded.FAILED:
            # The app's final answer could not be recorded, retries included: relayed, it would
            # end the provider's retries and leave the row `processing` for good. The provider
            # comes back instead, and after the lease the event is taken over (attempt + 1).
            return refuse("store_error", "record_failed")
        if done.result.state is EventState.DONE:
            if done.recorded is Recorded.WRITTEN:
                self._remember_done(delivery, ours, done.result)
            result = (Result.NEW if all(o.result is Result.NEW for o in ours)
                      else Result.TAKEOVER)
            return relayed(done.response, done.attempt, result)
        return relayed(done.response, done.attempt, Result.UPSTREAM_ERROR)

    def _remember_done(self, delivery: Delivery, ours: Sequence[_Ours],
                       result: AttemptResult) -> None:
        """The rows this forward just recorded as done, as the store now holds them (what a
        duplicate is answered with; their times are not the store's and are not read), each
        until retention deletes it: fixed when its claim or take-over read it (``until``)."""
        now = self._clock()
        for o in ours:
            self._known.remember_done(EventRow(
                delivery.key, o.item.event_id, EventState.DONE, o.attempt, o.digest,
                received_at=now, updated_at=now, lease_until=None, outcome=result.outcome,
                response=result.response, latency_ms=result.latency_ms, now=now, in_queue=False,
            ), o.until)

    async def _abandon(self, delivery: Delivery, ours: Sequence[_Ours]) -> None:
        """Best effort: mark attempts this delivery claimed but will not forward as failed
        (never reached the app). Fenced by attempt; if the store is still failing, the leases
        expire as after a crash. The writes run together, so a batch's 503 waits at most about
        one store deadline, not one per claimed item."""
        not_sent = AttemptResult(EventState.FAILED, Outcome.CONNECT_ERROR, None, 0.0)
        writes = [self._store.complete(delivery.key, o.item.event_id, o.attempt, not_sent)
                  for o in ours]
        for outcome in await asyncio.gather(*writes, return_exceptions=True):
            if isinstance(outcome, BaseException) and not isinstance(outcome, StoreError):
                raise outcome


def _split(ours: Sequence[_Ours], dropped: frozenset[int]) -> tuple[list[_Ours], list[_Ours]]:
    """The owned items to forward, and those the filter drops."""
    return ([o for o in ours if o.item.position not in dropped],
            [o for o in ours if o.item.position in dropped])


def _note(trace: Trace, done: Forwarded, upstream: str) -> None:
    """What the forward tells the delivery's log line (``upstream``: the app's origin)."""
    trace.attempt = done.attempt
    trace.fields["upstream"] = upstream
    trace.fields["app_status_class"] = status_class(done.response)
    trace.fields["upstream_ms"] = round(done.result.latency_ms, 2)
    if done.upstream_error:
        trace.fields["upstream_error"] = done.upstream_error
    if done.record_error:
        trace.fields["record_error"] = done.record_error
    if done.recorded is Recorded.SUPERSEDED:
        trace.fields["superseded"] = True


def _recorded(row: EventRow) -> _Settled:
    """A done row's answer: the recorded response, replayed."""
    return _Settled(replayed(row.response, row.attempt), row.attempt)
