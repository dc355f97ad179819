"""The delivery pipeline: one inbound webhook in, one answer out. No HTTP server, database driver,
logger or metrics library here: collaborators are passed in once, as ports, and every rule is a
call into the core (``decide``, ``core.answers``, ``core.batch``).

    verify ─ bind nonce ─ handshake ─ event ids ─ body replay ─ claim each ─┬─ forward, record
                                                                            └─ or answer from rows

A single event is a batch of one item: the same path claims it, forwards it and answers.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from sidecar.config.model import Mode, ProviderConfig
from sidecar.core.answers import (
    Answer,
    Result,
    accepted,
    mirrored,
    no_answer,
    refuse,
    relayed,
    replayed,
)
from sidecar.core.batch import batch_answer, claim_digest, filtered_body
from sidecar.core.body import Body, NotJson
from sidecar.core.bodyreplay import guard_key, ids_digest
from sidecar.core.decision import (
    AnswerRecorded,
    Busy,
    MirrorFailure,
    QueueOwned,
    TakeOver,
    Wait,
    decide,
    finishes_in_forward_mode,
    rejects_other_body,
    status_class,
)
from sidecar.core.errors import EventIdError, RowLocked, StoreError, VerificationError
from sidecar.core.eventid import BatchItem, EventIdSpec, delivery_items, extract_event_id
from sidecar.core.events import (
    AttemptResult,
    Claim,
    EventRow,
    EventState,
    Forwarded,
    Outcome,
    StoredRequest,
)
from sidecar.core.forwarded import Network, forwarding_headers
from sidecar.core.handshake import handshake_answer
from sidecar.core.known import KnownAnswers
from sidecar.core.ports import DeliveryStore
from sidecar.core.signing import verify

MAX_DECISION_STEPS = 1000  # a safety bound; every step waits, answers or makes progress


@dataclass(frozen=True, slots=True)
class Inbound:
    """One request on a provider's route, as received (the body already read within bounds)."""

    method: str
    path: str  # path and query, as received
    query: str  # the raw query string, without "?"
    headers: Mapping[str, str]  # case-insensitive; items() yields every header in order
    body: bytes
    peer: str | None = None  # the TCP peer's address
    scheme: str = "http"  # of the listener the request came in on


class Forwarding(Protocol):
    """Forwards once on behalf of ``rows`` (``(event_id, attempt)``) and records the result on
    each row (``sidecar.forwarding.Forwarder``)."""

    async def forward(self, provider: ProviderConfig, rows: Sequence[tuple[str, int]],
                      method: str, path: str, headers: Iterable[tuple[str, str]],
                      body: bytes) -> Forwarded: ...


class Observer(Protocol):
    """What the pipeline reports besides its answer (metrics and warnings)."""

    def claimed(self, provider: str, seconds: float) -> None: ...

    def payload_mismatch(self, provider: str, event_id: str) -> None: ...


class Keys(Protocol):
    def key_bytes(self, provider: str) -> tuple[bytes, ...]: ...


@dataclass(frozen=True, slots=True)
class _Ours:
    """This delivery owns an attempt at the event: it forwards it."""

    item: BatchItem
    attempt: int
    result: Result  # NEW or TAKEOVER
    digest: bytes  # what the row holds as the body's hash (``claim_digest``)
    until: float  # if it ends done: when retention deletes the row (``KnownAnswers.until``)


@dataclass(frozen=True, slots=True)
class _Settled:
    """Another delivery's row answers for the event."""

    answer: Answer
    attempt: int


class _Trace:
    """What one delivery learned on its way, for its log line."""

    __slots__ = ("attempt", "event_id", "fields")

    def __init__(self) -> None:
        self.event_id: str | None = None
        self.attempt: int | None = None
        self.fields: dict[str, object] = {}

    def finish(self, answer: Answer) -> Answer:
        log: dict[str, object] = {"event_id": self.event_id, "attempt": self.attempt}
        if answer.reason is not None:
            log["reason"] = answer.reason
        log.update(self.fields)
        return Answer(answer.status, answer.headers, answer.body, answer.result, answer.reason,
                      log)


class Pipeline:
    """Built once at start-up; ``deliver`` is called once per request."""

    def __init__(self, *, store: DeliveryStore, forwarder: Forwarding, keyring: Keys, owner: str,
                 observer: Observer, clock: Callable[[], float] = time.time,
                 trusted_proxies: Sequence[Network] = (),
                 known: KnownAnswers | None = None,
                 on_queued: Callable[[str], None] = lambda provider: None) -> None:
        self._store = store
        self._forwarder = forwarder
        self._keyring = keyring
        self._owner = owner
        self._observer = observer
        self._clock = clock
        self._trusted_proxies = tuple(trusted_proxies)  # empty: no peer is trusted
        # Done events and replay-guard bindings this process has seen (``core.known``).
        self._known = known if known is not None else KnownAnswers(0)
        self._on_queued = on_queued  # wakes this process's delivery workers of a provider

    async def deliver(self, provider: ProviderConfig, inbound: Inbound) -> Answer:
        trace = _Trace()
        try:
            answer = await self._deliver(provider, inbound, Body(inbound.body), trace)
        except StoreError as exc:
            trace.fields["error"] = str(exc)
            answer = refuse("store_error")
        except Exception as exc:  # a bug: answered 500, logged with its traceback, counted
            trace.fields["exc_info"] = exc
            answer = refuse("internal_error")
        return trace.finish(answer)

    async def _deliver(self, provider: ProviderConfig, inbound: Inbound, body: Body,
                       trace: _Trace) -> Answer:
        keys = self._keyring.key_bytes(provider.key)
        try:
            verify(provider.signature, keys, body.raw, inbound.headers, self._clock(),
                   method=inbound.method, query=inbound.query)
        except VerificationError as exc:
            return refuse("invalid_signature", exc.reason)

        if provider.replay_nonce is not None:
            refused = await self._check_nonce(provider.key, provider.replay_nonce, inbound, body)
            if refused is not None:
                return refused

        if provider.handshake is not None:
            handshake = handshake_answer(provider.handshake, body, inbound.headers, keys)
            if handshake is not None:
                return Answer(handshake.status, (("Content-Type", handshake.content_type),),
                              handshake.body, Result.HANDSHAKE)

        try:
            items = delivery_items(provider.event_id, body, inbound.headers)
        except EventIdError as exc:
            return refuse("no_event_id", exc.reason)
        trace.event_id = items[0].event_id
        if provider.event_id.is_batch:
            trace.fields["batch_size"] = len(items)
        if provider.guards_body_replay and await self._replayed_body(provider, body, items):
            return refuse("replayed_body")

        if provider.mode is Mode.QUEUE:  # not a batch provider (the loader refuses it)
            answer = await self._accept(provider, inbound, body, items[0], trace)
            if answer is not None:
                return answer
            # The event was first seen in forward mode: it finishes in forward mode.
        return await self._forward_mode(provider, inbound, body, items, trace)

    async def _forward_mode(self, provider: ProviderConfig, inbound: Inbound, body: Body,
                            items: list[BatchItem], trace: _Trace) -> Answer:
        # What the app gets and a re-drive replays: computed once, and only when needed.
        app_headers = self._app_headers(inbound) if provider.store_payload else None
        ours, settled = await self._claim_all(provider, inbound, body, items, app_headers, trace)
        if provider.event_id.is_batch:
            trace.fields["batch_forwarded"] = len(ours)
        forwarded: Answer | None = None
        if ours:
            if app_headers is None:
                app_headers = self._app_headers(inbound)
            forwarded = await self._forward(provider, inbound, body, items, ours, app_headers,
                                            trace)
        else:
            trace.attempt = settled[0].attempt
        return batch_answer(forwarded, [s.answer for s in settled])

    async def _accept(self, provider: ProviderConfig, inbound: Inbound, body: Body,
                      item: BatchItem, trace: _Trace) -> Answer | None:
        """Queue mode: store the event with its request in one statement and answer 200 at
        once; the delivery workers forward it. A redelivery is answered the same. None: the
        event's row was written in forward mode (before the provider switched to queue), and
        is not done: forward mode's rules finish it, so a provider is never told "accepted"
        for an event no worker would deliver."""
        event_id = item.event_id
        digest = body.sha256
        known = self._known.accepted(provider.key, event_id)
        if known is not None:
            trace.fields["known"] = True
            return self._accepted_again(provider, event_id, known, digest, trace)
        request = StoredRequest(inbound.method, inbound.path, self._app_headers(inbound),
                                body.raw)
        started = time.monotonic()
        asked = self._known.now()
        enqueued = await self._store.enqueue(
            provider.key, event_id, digest, request, order_key=order_key_of(provider, body),
            max_depth=provider.queue.max_queue_depth)
        seconds = time.monotonic() - started
        self._observer.claimed(provider.key, seconds)
        trace.fields["claim_ms"] = round(seconds * 1000, 2)
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
        trace.attempt = row.attempt
        return self._accepted_again(provider, event_id, row.body_sha256, digest, trace)

    def _accepted_again(self, provider: ProviderConfig, event_id: str, stored: bytes,
                        digest: bytes, trace: _Trace) -> Answer:
        if self._refuses_other_body(provider, event_id, stored, digest, trace):
            return refuse("payload_mismatch")
        return accepted(event_id, first=False)

    def _refuses_other_body(self, provider: ProviderConfig, event_id: str, seen: bytes,
                            digest: bytes, trace: _Trace) -> bool:
        """A known event arriving with another body: counted and noted; whether the
        provider's policy refuses it (``core.decision.rejects_other_body``)."""
        rejected = rejects_other_body(seen, digest, provider.on_payload_mismatch)
        if rejected is None:
            return False
        self._observer.payload_mismatch(provider.key, event_id)
        trace.fields["payload_mismatch"] = True
        return rejected

    async def _check_nonce(self, provider: str, spec: EventIdSpec, inbound: Inbound,
                           body: Body) -> Answer | None:
        """For schemes that sign a nonce but not the body (Mailgun): bind the nonce to this
        body on first sight; the same signed nonce with another body is a reused signature."""
        try:
            nonce = extract_event_id(spec, body, inbound.headers)
        except EventIdError:
            return refuse("invalid_signature", "missing_nonce")
        bound = await self._store.bind_nonce(provider, nonce, body.sha256)
        if bound.digest != body.sha256:
            return refuse("invalid_signature", "replayed_signature")
        return None

    async def _replayed_body(self, provider: ProviderConfig, body: Body,
                             items: Sequence[BatchItem]) -> bool:
        """Whether this verified body was first seen under other event ids (``core.bodyreplay``:
        a captured body resent under a fresh, unsigned id). The first sight binds it."""
        ids = ids_digest([item.event_id for item in items])
        guard = guard_key(body.sha256)
        bound = self._known.bound(provider.key, guard)
        if bound is None:
            asked = self._known.now()
            binding = await self._store.bind_nonce(provider.key, guard, ids)
            bound = binding.digest
            self._known.remember_bound(provider.key, guard, bound,
                                       self._known.until(asked, provider.retention, binding))
        return bound != ids

    async def _claim_all(self, provider: ProviderConfig, inbound: Inbound, body: Body,
                         items: list[BatchItem],
                         app_headers: tuple[tuple[str, str], ...] | None, trace: _Trace
                         ) -> tuple[list[_Ours], list[_Settled]]:
        """Claim every event of the delivery. If the store fails midway, the attempts already
        claimed are marked failed before the error goes on, so the provider's retry takes them
        over at once instead of after the lease."""
        deadline = asyncio.get_running_loop().time() + provider.inflight_wait
        payload = (StoredRequest(inbound.method, inbound.path, app_headers, body.raw)
                   if app_headers is not None else None)
        ours: list[_Ours] = []
        settled: list[_Settled] = []
        try:
            for item in items:
                digest = claim_digest(provider.event_id, body, item)
                resolved = await self._resolve(provider, item, digest, payload, deadline, trace)
                if isinstance(resolved, _Ours):
                    ours.append(resolved)
                else:
                    settled.append(resolved)
        except StoreError:
            await self._abandon(provider, ours)
            raise
        return ours, settled

    async def _resolve(self, provider: ProviderConfig, item: BatchItem, digest: bytes,
                       payload: StoredRequest | None, deadline: float,
                       trace: _Trace) -> _Ours | _Settled:
        """Claim one event id and, when another delivery has it, follow the core's decisions
        until this delivery owns an attempt or knows the answer. Waits at most until
        ``deadline`` (loop time)."""
        loop = asyncio.get_running_loop()
        event_id = item.event_id
        known = self._known.done(provider.key, event_id)
        if known is not None:
            # Answered without the database, as its done row would be (``decide``:
            # AnswerRecorded). Nothing is learned, so nothing is remembered anew: the entry's
            # end stays where it was fixed when the fact was first learned.
            trace.fields["known"] = True
            if self._refuses_other_body(provider, event_id, known.body_sha256, digest, trace):
                return _Settled(refuse("payload_mismatch"), known.attempt)
            return _recorded(known)

        # ``asked``: the memory's clock before the store call that read ``row``, which dates
        # what the memory learns from it (``KnownAnswers.until``).
        asked = self._known.now()
        claim = await self._claim(provider, event_id, digest, payload, trace)
        if claim.won:
            return _Ours(item, 1, Result.NEW, digest,
                         self._known.until(asked, provider.retention, claim.row))
        if self._refuses_other_body(provider, event_id, claim.row.body_sha256, digest, trace):
            return _Settled(refuse("payload_mismatch"), claim.row.attempt)
        row: EventRow | None = claim.row

        waits = 0
        for _ in range(MAX_DECISION_STEPS):
            if row is None:  # deleted meanwhile (operator or retention): claim afresh
                asked = self._known.now()
                claim = await self._claim(provider, event_id, digest, payload, trace)
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
                    # A take-over keeps the row's first receipt: so does its answer's memory.
                    until = self._known.until(asked, provider.retention, row)
                    try:
                        attempt = await self._store.take_over(provider.key, event_id,
                                                              provider.lease, self._owner)
                    except RowLocked:  # another session holds the row: as good as in flight
                        return _Settled(refuse("in_flight", "row_locked", lease=1), row.attempt)
                    if attempt is not None:
                        return _Ours(item, attempt, Result.TAKEOVER, digest, until)
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

    async def _claim(self, provider: ProviderConfig, event_id: str, digest: bytes,
                     payload: StoredRequest | None, trace: _Trace) -> Claim:
        """The claim: won (this delivery inserted the row), or the row another one holds."""
        started = time.monotonic()
        claim = await self._store.claim(provider.key, event_id, digest, provider.lease,
                                        self._owner, payload)
        seconds = time.monotonic() - started
        self._observer.claimed(provider.key, seconds)
        trace.fields.setdefault("claim_ms", round(seconds * 1000, 2))
        return claim

    async def _forward(self, provider: ProviderConfig, inbound: Inbound, body: Body,
                       items: list[BatchItem], ours: list[_Ours],
                       app_headers: tuple[tuple[str, str], ...], trace: _Trace) -> Answer:
        rows = [(o.item.event_id, o.attempt) for o in ours]
        if provider.event_id.is_batch:
            body_bytes = filtered_body(provider.event_id, body, {o.item.position for o in ours},
                                       items)
        else:
            body_bytes = body.raw
        done = await self._forwarder.forward(provider, rows, inbound.method, inbound.path,
                                             app_headers, body_bytes)
        trace.attempt = done.attempt
        trace.fields["app_status_class"] = status_class(done.response)
        trace.fields["upstream_ms"] = round(done.result.latency_ms, 2)
        if done.upstream_error:
            trace.fields["upstream_error"] = done.upstream_error
        if done.record_error:
            trace.fields["record_error"] = done.record_error
        if done.recorded is False:
            trace.fields["superseded"] = True
        if done.response is None:
            return no_answer(done.result.outcome)
        if done.result.state is EventState.DONE and done.record_error:
            # The app's final answer could not be recorded, retries included: relayed, it would
            # end the provider's retries and leave the row `processing` for good. The provider
            # comes back instead, and after the lease the event is taken over (attempt + 1).
            return refuse("store_error", "record_failed")
        if done.result.state is EventState.DONE:
            if done.recorded:
                self._remember_done(provider, ours, done.result)
            result = (Result.NEW if all(o.result is Result.NEW for o in ours)
                      else Result.TAKEOVER)
            return relayed(done.response, done.attempt, result)
        return relayed(done.response, done.attempt, Result.UPSTREAM_ERROR)

    def _remember_done(self, provider: ProviderConfig, ours: Sequence[_Ours],
                       result: AttemptResult) -> None:
        """The rows this forward just recorded as done, as the store now holds them (what a
        duplicate is answered with; their times are not the store's and are not read), each
        until retention deletes it: fixed when its claim or take-over read it (``until``)."""
        now = self._clock()
        for o in ours:
            self._known.remember_done(EventRow(
                provider.key, o.item.event_id, EventState.DONE, o.attempt, o.digest,
                received_at=now, updated_at=now, lease_until=None, outcome=result.outcome,
                response=result.response, latency_ms=result.latency_ms, now=now, in_queue=False,
            ), o.until)

    def _app_headers(self, inbound: Inbound) -> tuple[tuple[str, str], ...]:
        """The headers the app gets, now and on a re-drive: forwarding headers by the
        trusted-hops rule (``core.forwarded``). Signatures are verified on the raw ones."""
        return forwarding_headers(inbound.headers.items(), inbound.peer, inbound.scheme,
                                  self._trusted_proxies)

    async def _abandon(self, provider: ProviderConfig, ours: list[_Ours]) -> None:
        """Best effort: mark attempts this delivery claimed but will not forward as failed
        (never reached the app). Fenced by attempt; if the store is still failing, the leases
        expire as after a crash. The writes run together, so a batch's 503 waits at most about
        one store deadline, not one per claimed item."""
        not_sent = AttemptResult(EventState.FAILED, Outcome.CONNECT_ERROR, None, 0.0)
        writes = [self._store.complete(provider.key, o.item.event_id, o.attempt, not_sent)
                  for o in ours]
        for outcome in await asyncio.gather(*writes, return_exceptions=True):
            if isinstance(outcome, BaseException) and not isinstance(outcome, StoreError):
                raise outcome


def _recorded(row: EventRow) -> _Settled:
    """A done row's answer: the recorded response, replayed."""
    return _Settled(replayed(row.response, row.attempt), row.attempt)


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
