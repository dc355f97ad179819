"""Plain values describing an event row and an attempt's result, shared by core and stores."""

from __future__ import annotations

import base64
import enum
import json
from dataclasses import dataclass, field


def headers_to_json(headers: tuple[tuple[str, str], ...]) -> list[list[object]]:
    """Header pairs as JSON-safe values. aiohttp decodes header bytes that are not UTF-8 as lone
    surrogates, which PostgreSQL's jsonb refuses: such a value is kept as its exact bytes,
    ``{"b64": …}``, so it round-trips."""
    pairs: list[list[object]] = []
    for name, value in headers:
        try:
            value.encode("utf-8")
            pairs.append([name, value])
        except UnicodeEncodeError:
            raw = value.encode("utf-8", "surrogateescape")
            pairs.append([name, {"b64": base64.b64encode(raw).decode()}])
    return pairs


def headers_from_json(pairs: list[list[object]]) -> tuple[tuple[str, str], ...]:
    headers: list[tuple[str, str]] = []
    for name, value in pairs:
        if isinstance(value, dict):
            value = base64.b64decode(str(value["b64"])).decode("utf-8", "surrogateescape")
        headers.append((str(name), str(value)))
    return tuple(headers)


class EventState(enum.StrEnum):
    PROCESSING = "processing"
    DONE = "done"
    FAILED = "failed"
    QUEUED = "queued"  # queue mode: accepted, waiting for a delivery worker (or its next try)
    DEAD = "dead"  # queue mode: the delivery budget ran out; kept for inspection and re-drive


class Outcome(enum.StrEnum):
    """How an attempt ended, as recorded on the row."""

    RESPONSE = "response"  # the upstream answered with an HTTP status
    TIMEOUT = "timeout"  # no answer within upstream.timeout (the app may have processed it)
    CONNECT_ERROR = "connect_error"  # could not connect: the app certainly did not see it
    DISCONNECTED = "disconnected"  # connection lost before an answer (outcome unknown)
    FILTERED = "filtered"  # never sent: the provider's filter drops it (done, 200 recorded)


@dataclass(frozen=True, slots=True)
class RecordedResponse:
    """The upstream's answer as kept on the row for replay (body already bounded)."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes


@dataclass(frozen=True, slots=True)
class AttemptResult:
    """What one forward produced; written to the row fenced by the attempt number."""

    state: EventState  # DONE or FAILED, never PROCESSING
    outcome: Outcome
    response: RecordedResponse | None
    latency_ms: float


@dataclass(frozen=True, slots=True)
class Attempt:
    """One try of an event to reach the app, as recorded when its result was written.

    Written by the same statement (PostgreSQL) or transaction (SQLite) that writes the result
    on the event row, so a row's result and its timeline never disagree; a superseded write
    records nothing. Times are epoch seconds from the database clock."""

    attempt: int  # the attempt number the app was told
    started_at: float  # finished_at - latency
    finished_at: float  # when the result was written
    owner: str | None  # the lease owner (which proxy process) that made it
    outcome: Outcome  # response / timeout / connect_error / disconnected
    status: int | None  # the app's HTTP status, None without an answer
    latency_ms: float
    state: EventState  # what the row became: DONE, FAILED, QUEUED (retry due), DEAD
    error: str | None  # a short error text when there was no answer (queue: last_error)


class Recorded(enum.Enum):
    """What became of a forward's result write on the rows it was for."""

    WRITTEN = "written"  # on every row
    SUPERSEDED = "superseded"  # a newer attempt had taken a row over: nothing written there
    FAILED = "failed"  # the store failed, retries included (``Forwarded.record_error``)


@dataclass(frozen=True, slots=True)
class Forwarded:
    """One forward to the app and the recording of its result on the rows it was for."""

    attempt: int  # the highest attempt among those rows: what the app was told
    result: AttemptResult
    response: RecordedResponse | None  # None when the app gave no HTTP answer
    upstream_error: str | None
    recorded: Recorded
    record_error: str | None = None  # why, when ``recorded`` is FAILED


@dataclass(frozen=True, slots=True)
class EventRow:
    """One row of the event table as read, with the database clock at read time.

    Times are seconds since the Unix epoch, taken from the database clock so that several
    proxy replicas with skewed clocks agree on lease expiry.

    ``in_queue``: the row has a queue entry, read with it — queue mode's delivery workers own
    the event until it is done (queued, in flight with them, or dead; the entry goes with the
    ``done`` state). The store's fact, so that ``core.decision`` can tell a queue-mode row from
    a forward-mode one in the same state.
    """

    provider: str
    event_id: str
    state: EventState
    attempt: int
    body_sha256: bytes
    received_at: float
    updated_at: float
    lease_until: float | None
    outcome: Outcome | None
    response: RecordedResponse | None
    latency_ms: float | None
    now: float  # database clock when this row was read
    in_queue: bool

    @property
    def lease_live(self) -> bool:
        return (
            self.state is EventState.PROCESSING
            and self.lease_until is not None
            and self.lease_until > self.now
        )


@dataclass(frozen=True, slots=True)
class NonceBinding:
    """A nonce (or the replay guard's body key) as bound in the store: the hash it is bound to,
    when it was first bound, and the database clock at the answer (epoch seconds, as in
    ``EventRow``). Its age, ``now - received_at``, tells how long retention still keeps it."""

    digest: bytes  # the body hash (Mailgun) or the event ids' digest (the replay guard)
    received_at: float
    now: float


@dataclass(frozen=True, slots=True)
class StoredRequest:
    """A request as the app gets it (its headers by the trusted-hops rule): what a forward
    sends, and the first delivery's request, kept for providers with ``store_payload: true``
    so that an operator can re-drive a failed event, and for queue mode's workers."""

    method: str
    path: str  # path and query as received
    headers: tuple[tuple[str, str], ...]
    body: bytes = field(repr=False)
    # The W3C traceparent of the span that accepted it (queue mode, tracing on): a delivery
    # worker's attempt links to it. Not a header: the app never gets it.
    traceparent: str | None = None
    # Fan-out: the names of the destinations the event was accepted for (their filters
    # admitted it), fixed at acceptance. None: the provider has no destinations.
    destinations: tuple[str, ...] | None = None

    def meta_json(self) -> str:
        meta: dict[str, object] = {"method": self.method, "path": self.path,
                                   "headers": headers_to_json(self.headers)}
        if self.traceparent is not None:
            meta["traceparent"] = self.traceparent
        if self.destinations is not None:
            meta["destinations"] = list(self.destinations)
        return json.dumps(meta)

    @classmethod
    def from_stored(cls, body: bytes, meta_json: str) -> StoredRequest:
        meta = json.loads(meta_json)
        traceparent = meta.get("traceparent")
        destinations = meta.get("destinations")
        return cls(method=str(meta["method"]), path=str(meta["path"]),
                   headers=headers_from_json(meta["headers"]), body=body,
                   traceparent=str(traceparent) if traceparent is not None else None,
                   destinations=(tuple(str(name) for name in destinations)
                                 if destinations is not None else None))


@dataclass(frozen=True, slots=True)
class Guard:
    """A binding a claim makes first (``DeliveryStore.claim_guarded``): ``key``, in the
    provider's nonce table, bound to ``digest`` unless it is bound already. The replay guard
    binds a body's key (``core.bodyreplay.guard_key``) to its event ids' digest."""

    key: str
    digest: bytes


@dataclass(frozen=True, slots=True)
class Claim:
    """The answer to a claim: ``won`` means this delivery inserted the row (attempt 1).
    ``binding``: a guarded claim's guard as bound, always to the guard's own digest (None: the
    claim carried no guard)."""

    won: bool
    row: EventRow
    binding: NonceBinding | None = None


@dataclass(frozen=True, slots=True)
class Replayed:
    """The answer to a guarded claim whose guard's key is bound to another digest: nothing was
    written (no binding, no row, nothing claimed). ``binding``: the key as bound."""

    binding: NonceBinding


@dataclass(frozen=True, slots=True)
class Enqueued:
    """The answer to an ``enqueue`` (queue mode's claim).

    ``accepted``: this delivery inserted the row (and its queue entry) now. ``row``: the
    existing row when another delivery had inserted it (None when accepted or full).
    ``full``: the event is new but the provider's queue held ``max_depth`` entries or more, so
    nothing was written (the provider is answered 503 and keeps the event)."""

    accepted: bool
    row: EventRow | None
    full: bool = False


@dataclass(frozen=True, slots=True)
class QueuedWork:
    """One queued event a delivery worker took (``take_queued``), leased to it.

    ``attempt`` is what the app is told (the row's attempt, already counting this try);
    ``tries`` fences this take: the settle names it, and a newer take of the same event
    supersedes it. ``round_attempts`` counts the attempts since the event was queued (or
    re-driven), for ``max_attempts``; ``queued_at`` starts ``max_age`` (database clock, epoch
    seconds); ``now`` is the database clock at the take."""

    provider: str
    event_id: str
    attempt: int
    tries: int
    round_attempts: int
    queued_at: float
    now: float
    request: StoredRequest


@dataclass(frozen=True, slots=True)
class Settlement:
    """How one try of a queued event ends, written fenced by its ``tries``.

    ``state``: DONE (the queue entry is removed), QUEUED (tried again in ``retry_in`` seconds)
    or DEAD (the entry stays, marked dead, for re-drive). ``reached``: False when the app
    certainly did not see this try (it could not be connected to): the row's attempt is then
    given back, so the app's next attempt number is the same. ``result`` is recorded on the
    row (outcome, the app's answer, latency), as in forward mode."""

    state: EventState
    result: AttemptResult
    retry_in: float | None = None
    reached: bool = True
    error: str | None = None  # why the try failed, kept on the queue entry for operators


@dataclass(frozen=True, slots=True)
class QueueEntry:
    """A queued event's place in its provider's queue, as operators see it."""

    provider: str
    event_id: str
    due_at: float | None  # None: dead
    tries: int
    queued_at: float
    order_key: str | None
    last_error: str | None
    now: float


@dataclass(frozen=True, slots=True)
class QueueStats:
    """One provider's queue, for metrics: entries waiting or in flight, dead entries, and the
    age of the oldest waiting one (seconds, database clock; 0 when none waits)."""

    pending: int
    dead: int
    oldest_pending_seconds: float
