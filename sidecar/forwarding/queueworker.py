"""Queue mode's delivery workers: in every proxy process, one per queue-mode provider, taking
the provider's due events from the store and forwarding each to the app exactly as forward
mode does, then writing how the try ended (``core.queueing`` decides; the store fences it).

    wake (accept here, NOTIFY, poll) ─ take due ≤ free slots ─ forward ─ settle: done | retry | dead
         busy: first wait ≤ 1 ms for company ┘    └ app unreachable: pause, then one probe at a time

Any number of processes share a queue: a take is ``FOR UPDATE SKIP LOCKED`` and leased, and a
crashed process's events are taken again once their leases end (attempt + 1).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Sequence
from typing import Final

from sidecar.config.model import Mode, ProviderConfig
from sidecar.core.answers import header
from sidecar.core.breaker import Admitted, Held, ProbeEnd, breaker_end
from sidecar.core.decision import status_class
from sidecar.core.errors import StoreError
from sidecar.core.events import AttemptResult, EventState, Outcome, QueuedWork, Settlement
from sidecar.core.limits import Permit
from sidecar.core.ports import QueueWorkerStore
from sidecar.core.queueing import RetryPolicy, ended, settlement, unreachable_pause
from sidecar.core.tracing import NO_TRACER, SpanKind, Tracer
from sidecar.forwarding.fanout import FanOut
from sidecar.forwarding.forwarder import (
    LEASE_MARGIN,
    Forwarder,
    Sent,
    destination_attributes,
    holds,
    shielded,
    write_until,
)
from sidecar.forwarding.holds import Holds
from sidecar.forwarding.limits import ProviderLimits
from sidecar.obs.logs import get_logger
from sidecar.obs.metrics import Metrics

log = get_logger("sidecar.queue")

HELD_RECHECK: Final = 0.5  # seconds between looks at a held provider's state (``holds``)
STORE_RETRY_PAUSE: Final = 1.0  # after a failed take, before the next (the store logs outages)

COMPANY_WAIT: Final = 0.0005
"""Seconds a take waits for company while the provider's queue is busy (forwards in flight):
the accepts and freed slots of that moment share its statement and commit instead of each
waking a take of one. The event loop's timer rounds it up to its 1 ms tick, so a lone event
that arrives while the queue is busy waits at most about 1 ms more; one that arrives while
nothing is in flight is taken at once."""


def retry_policy(provider: ProviderConfig) -> RetryPolicy:
    queue = provider.queue
    return RetryPolicy(queue.max_attempts, queue.max_age, queue.first_retry,
                       queue.max_retry_delay)


class QueueWorker:
    """Delivers one queue-mode provider's events from this process, up to
    ``queue.concurrency`` at a time. ``run`` until ``stop``; then ``finish`` lets the forwards
    in flight end (and record) until a deadline, and cancels the rest (their leases expire:
    another process, or the next start, takes them again)."""

    def __init__(self, provider: ProviderConfig, store: QueueWorkerStore, forwarder: Forwarder,
                 metrics: Metrics, owner: str, pending: set[asyncio.Task[bool]], *,
                 clock: Callable[[], float] = time.time,
                 rand: Callable[[], float] = random.random, tracer: Tracer = NO_TRACER,
                 company_wait: float = COMPANY_WAIT, holds: Holds | None = None,
                 fan_out: FanOut | None = None) -> None:
        self._provider = provider
        self._fan_out = fan_out  # a provider's own worker (not a destination's)
        self._holds = holds  # paused, or held by the breaker: nothing is taken
        self._company_wait = company_wait  # 0: take at once, always
        self._tracer = tracer
        self._policy = retry_policy(provider)
        self._store = store
        self._forwarder = forwarder
        self._metrics = metrics
        self._owner = owner
        self._pending = pending  # result writes in progress, awaited on shutdown
        self._clock = clock
        self._rand = rand
        self._nudge = asyncio.Event()  # new work, or a free slot
        self._stopping = False
        self._in_flight: set[asyncio.Task[None]] = set()
        self._unreachable = 0  # consecutive tries that could not connect to the app
        self._paused_until = 0.0  # loop time
        self._limits = ProviderLimits(provider, store, metrics, owner)

    @property
    def provider(self) -> str:
        return self._provider.key

    def wake(self) -> None:
        """New work may be due (accepted here, or NOTIFY from another process)."""
        self._nudge.set()

    def stop(self) -> None:
        """Take no more work; forwards in flight go on."""
        self._stopping = True
        self._nudge.set()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        concurrency = self._provider.queue.concurrency
        company = False  # the last turn waited for company: this one takes
        while not self._stopping:
            self._nudge.clear()
            waited, company = company, False
            wait = self._provider.queue.poll_interval
            paused = self._paused_until - loop.time()
            free = concurrency - len(self._in_flight)
            probing = self._unreachable > 0  # the app is down: one probe at a time
            wakeable = paused <= 0
            if paused > 0:
                wait = paused  # woken early only to stop
            elif free > 0 and not (probing and self._in_flight):
                if self._in_flight and not probing and not waited and self._company_wait > 0:
                    # Busy: a moment for the next accepts and freed slots to join this take;
                    # then the state is read anew (slots freed, a pause begun meanwhile).
                    await self._sleep(self._company_wait, wakeable=False)
                    company = True
                    continue
                admitted = await self._admit()
                if isinstance(admitted, Held):  # nothing taken, no attempt spent
                    await self._sleep(min(admitted.retry_after, HELD_RECHECK), wakeable=False)
                    continue
                # delivery.rate / concurrency: no more than the store lets this worker have.
                probe = probing or admitted.probe is not None
                reserved = await self._limits.reserve(1 if probe else free)
                limit = reserved.count
                if limit == 0:
                    if admitted.probe is not None:  # no turn to probe with: give it back
                        await self._ended(admitted, ProbeEnd.UNUSED, "")
                    wait, wakeable = reserved.wait, reserved.wakeable
                else:
                    leased_from = loop.time()  # the take's lease starts no earlier than this
                    taken = await self._take(limit)
                    if admitted.probe is not None and not taken:  # nothing to probe with
                        await self._ended(admitted, ProbeEnd.UNUSED, "")
                    permits = await self._limits.unused(reserved, len(taken or ()))
                    if taken is None:
                        wait = STORE_RETRY_PAUSE
                    else:
                        for work, permit in zip(taken, permits, strict=True):
                            self._start(work, leased_from, admitted, permit)
                        if len(taken) == limit and not probing:
                            continue  # more may be due: take again while slots are free
            await self._sleep(wait, wakeable=wakeable)

    async def _take(self, limit: int) -> Sequence[QueuedWork] | None:
        try:
            return await self._store.take_queued(
                self.provider, limit, self._provider.lease, self._owner,
                ordered=self._provider.queue.order_key is not None)
        except StoreError as exc:
            log.warning("queue_take_failed", provider=self.provider, error=str(exc))
            return None
        except Exception:  # a bug must not end delivery for the life of the process
            log.exception("queue_take_crashed", provider=self.provider)
            return None

    async def _sleep(self, seconds: float, *, wakeable: bool) -> None:
        if self._stopping:
            return
        try:
            async with asyncio.timeout(seconds):
                while True:
                    await self._nudge.wait()
                    if wakeable or self._stopping:
                        return
                    self._nudge.clear()
        except TimeoutError:
            return

    async def _admit(self) -> Admitted | Held:
        return Admitted() if self._holds is None else await self._holds.admit(self._provider)

    async def _ended(self, admitted: Admitted, end: ProbeEnd, why: str) -> None:
        if self._holds is not None:
            await self._holds.ended(self._provider, admitted, end, why)

    def _start(self, work: QueuedWork, leased_from: float, admitted: Admitted,
               permit: Permit | None) -> None:
        task = asyncio.create_task(
            self._limits.holding(permit, self._deliver(work, leased_from, admitted)),
            name=f"queue:{work.event_id}")
        self._in_flight.add(task)

        def done(finished: asyncio.Task[None]) -> None:
            self._in_flight.discard(finished)
            self._nudge.set()  # a slot is free
            if not finished.cancelled() and finished.exception() is not None:
                log.error("queue_delivery_crashed", provider=self.provider,
                          event_id=work.event_id, exc_info=finished.exception())

        task.add_done_callback(done)

    async def finish(self, deadline: float) -> None:
        """After ``stop``: wait for the forwards in flight until ``deadline`` (loop time), then
        cancel those still running (the app may have their request: the next take says
        attempt + 1)."""
        if not self._in_flight:
            return
        log.info("queue_draining", provider=self.provider, in_flight=len(self._in_flight))
        timeout = max(0.0, deadline - asyncio.get_running_loop().time())
        _, late = await asyncio.wait(set(self._in_flight), timeout=timeout)
        for task in late:
            task.cancel()
        if late:
            log.warning("queue_forwards_cancelled", provider=self.provider, count=len(late))
            await asyncio.wait(late, timeout=1.0)

    async def _deliver(self, work: QueuedWork, leased_from: float, admitted: Admitted) -> None:
        """One attempt; tracing on, its own trace, linked to the accept's."""
        if not self._tracer.enabled:
            await self._attempt(work, leased_from, admitted)
            return
        with self._tracer.linked("queue attempt", SpanKind.CONSUMER, {
                "webhook.provider": self._provider.provider_key,
                "webhook.event_id": work.event_id, "webhook.attempt": work.attempt,
                **destination_attributes(self._provider)}, work.request.traceparent) as span:
            outcome = await self._attempt(work, leased_from, admitted)
            span.set_attribute("webhook.result", outcome)
            if outcome == "dead":
                span.set_attribute("error.type", "dead")

    async def _attempt(self, work: QueuedWork, leased_from: float, admitted: Admitted) -> str:
        """Forward, settle, count and log; how the try ended (``core.queueing.ended``, or
        ``superseded``)."""
        provider = self._provider
        # The database set the lease during the take, after ``leased_from``: counting from
        # there ends the result write's retries before the real lease does, however slow the
        # take's answer was.
        lease_ends = leased_from + provider.lease
        took = self._clock()
        sent = await self._send(work)
        await self._ended(admitted, *breaker_end(sent.result))
        error = sent.error
        if error is None and sent.response is not None and sent.result.state is not \
                EventState.DONE:
            error = f"the app answered {sent.response.status}"
        now = self._clock()
        ends = settlement(sent.result, round_attempts=work.round_attempts,
                          age=(work.now - work.queued_at) + (now - took),
                          retry_after_value=header(sent.response, "Retry-After"),
                          policy=self._policy, now=now, rand=self._rand, error=error)
        self._pace(ends)
        written = await self._settle(work, ends, lease_ends - LEASE_MARGIN)
        outcome = ended(ends) if written else "superseded"
        origin = provider.upstream.origin
        self._metrics.queue_attempts.labels(self.provider, origin, outcome).inc()
        if written and ends.state is EventState.DEAD:
            self._metrics.dead_lettered.labels(self.provider).inc()
        fields: dict[str, object] = {
            "provider": self.provider, "event_id": work.event_id, "attempt": work.attempt,
            "result": outcome, "app_status_class": status_class(sent.response),
            "upstream": origin, "upstream_ms": round(sent.result.latency_ms, 2)}
        if error is not None:
            fields["upstream_error"] = error
        if ends.retry_in is not None and ends.reached:
            fields["retry_in_s"] = round(ends.retry_in, 3)
        if written is None:
            log.error("queue_record_failed", **fields)
        elif ends.state is EventState.DEAD:
            log.warning("queue_dead", **fields)
        else:
            log.info("queue_delivery", **fields)
        return outcome

    async def _send(self, work: QueuedWork) -> Sent:
        """The forward; a bug in it counts as an attempt whose outcome is unknown (the request
        may have gone out), so the event is retried, and dies by its budget, as any other."""
        started = time.monotonic()
        try:
            # An event accepted for destinations is queued for them instead, even if the
            # provider has none now: it keeps the set it was accepted with.
            if self._fan_out is not None and (work.request.destinations is not None
                                              or self._provider.fans_out):
                return await self._fan_out.send(self._provider, [work.event_id], work.attempt,
                                                work.request)
            return await self._forwarder.send(self._provider, [work.event_id], work.attempt,
                                              work.request)
        except Exception as exc:
            log.exception("queue_forward_crashed", provider=self.provider,
                          event_id=work.event_id, attempt=work.attempt)
            elapsed_ms = (time.monotonic() - started) * 1000
            return Sent(AttemptResult(EventState.FAILED, Outcome.DISCONNECTED, None, elapsed_ms),
                        None, f"internal error: {type(exc).__name__}")

    def _pace(self, ends: Settlement) -> None:
        """Pause the provider while the app cannot be connected to; resume on any answer."""
        if ends.reached:
            if self._unreachable:
                log.info("queue_app_reachable", provider=self.provider)
            self._unreachable = 0
            return
        now = asyncio.get_running_loop().time()
        if self._paused_until > now:
            return  # another try of the same round failed alike: one failure, one pause
        self._unreachable += 1
        pause = unreachable_pause(self._unreachable, self._policy)
        self._paused_until = now + pause
        if self._unreachable == 1:
            log.warning("queue_app_unreachable", provider=self.provider, pause_s=pause)

    async def _settle(self, work: QueuedWork, ends: Settlement, until: float) -> bool | None:
        """Write the settlement, retried while the lease lasts; shielded from cancellation and
        drained on shutdown like forward mode's result writes. None: it could not be written
        (the lease then ends and the event is taken again, attempt + 1)."""
        # A take that did not reach the app gives its attempt back (``Settlement.reached``).
        attempt = work.attempt if ends.reached else work.attempt - 1
        with self._tracer.span("record", attributes=self._forwarder.record_attributes(
                "settle_queued")) as span:
            [written] = await shielded([write_until(
                lambda: self._store.settle_queued(self.provider, work.event_id, work.tries,
                                                  ends),
                lambda row: holds(row, attempt, ends.state, ends.result), self._store,
                self.provider, work.event_id, work.attempt, until)], self._pending)
            if isinstance(written, BaseException):
                span.set_attribute("error.type", type(written).__name__)
        if isinstance(written, StoreError):
            return None
        if isinstance(written, BaseException):
            raise written
        return written


def _report_listen_end(task: asyncio.Task[None]) -> None:
    """The listener runs until cancelled; if it ends otherwise, workers still poll."""
    if not task.cancelled() and task.exception() is not None:
        log.error("queue_listen_crashed", exc_info=task.exception())


class QueueWorkers:
    """This process's delivery workers, one per queue-mode provider, and the store's wake-ups
    from other processes."""

    def __init__(self, providers: Sequence[ProviderConfig], store: QueueWorkerStore,
                 forwarder: Forwarder,
                 metrics: Metrics, owner: str, pending: set[asyncio.Task[bool]], *,
                 notify: bool, clock: Callable[[], float] = time.time,
                 tracer: Tracer = NO_TRACER, holds: Holds | None = None,
                 fan_out: FanOut | None = None) -> None:
        """``providers``: every route (``Config.routes``); a provider's own worker sends the
        events accepted for destinations with ``fan_out``."""
        self._workers = {p.key: QueueWorker(p, store, forwarder, metrics, owner, pending,
                                            clock=clock, tracer=tracer, holds=holds,
                                            fan_out=fan_out if p.destination is None else None)
                         for p in providers if p.mode is Mode.QUEUE}
        self._store = store
        self._notify = notify
        self._runs: list[asyncio.Task[None]] = []
        self._listen: asyncio.Task[None] | None = None

    def __bool__(self) -> bool:
        return bool(self._workers)

    def wake(self, provider: str) -> None:
        worker = self._workers.get(provider)
        if worker is not None:
            worker.wake()

    def start(self) -> None:
        for worker in self._workers.values():
            self._runs.append(asyncio.create_task(worker.run(),
                                                  name=f"queue-worker:{worker.provider}"))
        if self._workers and self._notify:
            self._listen = asyncio.create_task(self._store.listen_queue(self.wake),
                                               name="queue-listen")
            self._listen.add_done_callback(_report_listen_end)

    def stop(self) -> None:
        for worker in self._workers.values():
            worker.stop()

    async def finish(self, deadline: float) -> None:
        """Stop taking work; let forwards in flight end until ``deadline`` (loop time). A take
        still in progress is waited for first (its events start, and are drained like the
        others), so no forward starts after the drain; the listener is cancelled last."""
        self.stop()
        if self._runs:
            left = max(0.0, deadline - asyncio.get_running_loop().time())
            await asyncio.wait(self._runs, timeout=left)
        await asyncio.gather(*(w.finish(deadline) for w in self._workers.values()))
        tasks = [*self._runs, *([self._listen] if self._listen is not None else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
