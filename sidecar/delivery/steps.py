"""The steps every delivery takes before its mode's, and what both modes do when they claim.

    verify ─ bind nonce ─ handshake ─ event ids ─ body replay        (``Steps.admit``)

Each step takes the delivery and either answers it (a refusal, a handshake) or lets it go on.

The body-replay guard (``core.bodyreplay``) answers here only from what this process knows
(``KnownAnswers.bound``). A binding it does not know is left on the delivery (``guard``) for
the mode to make: forward mode makes it in its claim's own statement (``claim_guarded``),
where one claim follows at once (one event, not known done); otherwise it is made alone first
(``bind_guard``), as queue mode does. Either way every answer is the one a bind alone and then
the claim would give:

    guard bound …            claim finds …           answer
    known, to these ids      —                       the claim as unguarded, no binding write
    known, to other ids      —                       401 replayed_body, no store call
    not yet                  no row / a row          bound to these ids; the claim's answer
    to these ids             no row / a row          the claim's answer (binding unchanged)
    to other ids             no row / a row          401 replayed_body: no row made, none won

Both the bind and the claim are atomic across processes; folded, they are one atomic write, so
of concurrent copies offering one body under different ids exactly one binds and may claim.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from sidecar.core import phases
from sidecar.core.answers import Answer, Result, refuse
from sidecar.core.bodyreplay import guard_key, ids_digest
from sidecar.core.decision import rejects_other_body
from sidecar.core.errors import EventIdError, VerificationError
from sidecar.core.eventid import EventIdSpec, delivery_items, extract_event_id
from sidecar.core.events import Guard, NonceBinding
from sidecar.core.forwarded import Network, forwarding_headers
from sidecar.core.handshake import handshake_answer
from sidecar.core.known import KnownAnswers
from sidecar.core.ports import DeliveryStore
from sidecar.core.signing import Delivery as SignedRequest
from sidecar.core.signing import verify
from sidecar.core.tracing import StatementNote, Tracer, statement_note
from sidecar.delivery.context import Delivery, Inbound
from sidecar.delivery.ports import Keys, Observer

T = TypeVar("T")


class Steps:
    """The shared steps, built once with the collaborators they use."""

    def __init__(self, *, store: DeliveryStore, keyring: Keys, known: KnownAnswers,
                 observer: Observer, clock: Callable[[], float],
                 trusted_proxies: Sequence[Network], tracer: Tracer) -> None:
        self._store = store
        self._tracer = tracer
        self._keyring = keyring
        self._known = known
        self._observer = observer
        self._clock = clock
        self._trusted_proxies = tuple(trusted_proxies)  # empty: no peer is trusted

    async def admit(self, delivery: Delivery) -> Delivery | Answer:
        """Verify … body replay: the answer that ends the delivery here, or the delivery with
        its items, for its mode."""
        provider, inbound, body = delivery.provider, delivery.inbound, delivery.body
        keys = self._keyring.key_bytes(provider.key)
        with self._tracer.span("verify") as span:
            try:
                verify(provider.signature, keys,
                       SignedRequest(body.raw, inbound.headers, inbound.method, inbound.query),
                       self._clock())
            except VerificationError as exc:
                span.set_attribute("error.type", "invalid_signature")
                span.set_attribute("webhook.reason", exc.reason)
                return refuse("invalid_signature", exc.reason)

        if provider.replay_nonce is not None:
            refused = await self._check_nonce(delivery, provider.replay_nonce)
            if refused is not None:
                return refused

        if provider.handshake is not None:
            handshake = handshake_answer(provider.handshake, body, inbound.headers, keys)
            if handshake is not None:
                return Answer(handshake.status, (("Content-Type", handshake.content_type),),
                              handshake.body, Result.HANDSHAKE)

        try:
            delivery = delivery.with_items(
                delivery_items(provider.event_id, body, inbound.headers))
        except EventIdError as exc:
            return refuse("no_event_id", exc.reason)
        delivery.trace.event_id = delivery.items[0].event_id
        if provider.event_id.is_batch:
            delivery.trace.fields["batch_size"] = len(delivery.items)
        if provider.guards_body_replay:
            guard = Guard(guard_key(body.sha256),
                          ids_digest([item.event_id for item in delivery.items]))
            bound = self._known.bound(provider.key, guard.key)
            if bound is None:  # to be bound by the mode, with its claim or alone
                return delivery.with_guard(guard)
            if bound != guard.digest:
                return refuse("replayed_body")
        return delivery

    async def bind_guard(self, delivery: Delivery) -> Delivery | Answer:
        """The replay guard's binding still to be made, made alone (one statement): where no
        claim follows at once to carry it. The refusal, or the delivery with nothing left to
        bind."""
        guard = delivery.guard
        if guard is None:
            return delivery
        asked = self._known.now()
        binding = await self._store.bind_nonce(delivery.key, guard.key, guard.digest)
        if self.replayed(delivery, guard, asked, binding):
            return refuse("replayed_body")
        return delivery.with_guard(None)

    def replayed(self, delivery: Delivery, guard: Guard, asked: float,
                 binding: NonceBinding) -> bool:
        """Remember the guard's binding as the store answered it (``asked``: the memory's
        clock before the store call); whether it refuses this delivery's body (a body first
        seen under other event ids)."""
        provider = delivery.provider
        self._known.remember_bound(provider.key, guard.key, binding.digest,
                                   self._known.until(asked, provider.retention, binding))
        return binding.digest != guard.digest

    async def _check_nonce(self, delivery: Delivery, spec: EventIdSpec) -> Answer | None:
        """For schemes that sign a nonce but not the body (Mailgun): bind the nonce to this
        body on first sight; the same signed nonce with another body is a reused signature."""
        body = delivery.body
        try:
            nonce = extract_event_id(spec, body, delivery.inbound.headers)
        except EventIdError:
            return refuse("invalid_signature", "missing_nonce")
        bound = await self._store.bind_nonce(delivery.key, nonce, body.sha256)
        if bound.digest != body.sha256:
            return refuse("invalid_signature", "replayed_signature")
        return None

    # -- what both modes do when they claim ---------------------------------------------------

    async def claimed(self, delivery: Delivery, claim: Awaitable[T],
                      operation: str = "claim") -> T:
        """The store's answer to ``claim`` (a claim, or queue mode's enqueue), timed: observed,
        and the first one's time noted on the trace (and in a span, tracing on)."""
        started = time.monotonic()
        answer = await (self._traced(claim, operation) if self._tracer.enabled else claim)
        phases.mark(operation, "_return")
        seconds = time.monotonic() - started
        self._observer.claimed(delivery.key, seconds)
        delivery.trace.fields.setdefault("claim_ms", round(seconds * 1000, 2))
        return answer

    async def _traced(self, claim: Awaitable[T], operation: str) -> T:
        """``claim`` in a span saying whether its statement went out alone or in a coalesced
        batch (the store notes it: ``core.tracing.statement_note``)."""
        note = StatementNote()
        token = statement_note.set(note)
        try:
            with self._tracer.span(operation, attributes={
                    "db.system": self._tracer.db_system, "db.system.name": self._tracer.db_system,
                    "db.operation": operation, "db.operation.name": operation}) as span:
                answer = await claim
                if note.batch_size is not None:
                    span.set_attribute("webhook.batched", note.batch_size > 1)
                    if note.batch_size > 1:
                        span.set_attribute("db.operation.batch.size", note.batch_size)
                return answer
        finally:
            statement_note.reset(token)

    def refuses_other_body(self, delivery: Delivery, event_id: str, seen: bytes,
                           digest: bytes) -> bool:
        """A known event arriving with another body: counted and noted; whether the
        provider's policy refuses it (``core.decision.rejects_other_body``)."""
        rejected = rejects_other_body(seen, digest, delivery.provider.on_payload_mismatch)
        if rejected is None:
            return False
        self._observer.payload_mismatch(delivery.key, event_id)
        delivery.trace.fields["payload_mismatch"] = True
        return rejected

    def app_headers(self, inbound: Inbound) -> tuple[tuple[str, str], ...]:
        """The headers the app gets, now and on a re-drive: forwarding headers by the
        trusted-hops rule (``core.forwarded``). Signatures are verified on the raw ones."""
        return forwarding_headers(inbound.headers.items(), inbound.peer, inbound.scheme,
                                  self._trusted_proxies)
