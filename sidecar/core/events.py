"""Plain values describing an event row and an attempt's result, shared by core and stores."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field


class EventState(enum.StrEnum):
    PROCESSING = "processing"
    DONE = "done"
    FAILED = "failed"


class Outcome(enum.StrEnum):
    """How an attempt ended, as recorded on the row."""

    RESPONSE = "response"  # the upstream answered with an HTTP status
    TIMEOUT = "timeout"  # no answer within upstream.timeout (the app may have processed it)
    CONNECT_ERROR = "connect_error"  # could not connect: the app certainly did not see it
    DISCONNECTED = "disconnected"  # connection lost before an answer (outcome unknown)


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
class EventRow:
    """One row of the event table as read, with the database clock at read time.

    Times are seconds since the Unix epoch, taken from the database clock so that several
    proxy replicas with skewed clocks agree on lease expiry.
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

    @property
    def lease_live(self) -> bool:
        return (
            self.state is EventState.PROCESSING
            and self.lease_until is not None
            and self.lease_until > self.now
        )


@dataclass(frozen=True, slots=True)
class StoredRequest:
    """The first delivery's request, kept for providers with ``store_payload: true`` so that an
    operator can re-drive a failed event."""

    method: str
    path: str  # path and query as received
    headers: tuple[tuple[str, str], ...]
    body: bytes = field(repr=False)

    def meta_json(self) -> str:
        return json.dumps({"method": self.method, "path": self.path,
                           "headers": [list(pair) for pair in self.headers]})

    @classmethod
    def from_stored(cls, body: bytes, meta_json: str) -> StoredRequest:
        meta = json.loads(meta_json)
        return cls(method=str(meta["method"]), path=str(meta["path"]),
                   headers=tuple((str(n), str(v)) for n, v in meta["headers"]), body=body)


@dataclass(frozen=True, slots=True)
class Claim:
    """The answer to a claim: ``won`` means this delivery inserted the row (attempt 1)."""

    won: bool
    row: EventRow
