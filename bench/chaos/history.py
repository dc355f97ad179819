"""What one chaos run recorded, as plain values: what the simulated provider sent and was
answered, what the app received and answered, what the proxies logged about each forward, the
replicas the harness killed, and the event rows left after quiescence.

Times are seconds on one monotonic clock (the harness's), relative to the start of the run.
"""

from __future__ import annotations

import enum
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

# A provider redelivers on these and on any 5xx or missing answer; any other non-2xx is final.
RETRYABLE_4XX = frozenset({408, 409, 425, 429})


class Kind(enum.StrEnum):
    """What the simulated provider sent under an event id."""

    NORMAL = "normal"  # a signed JSON event: must eventually be answered 2xx
    GZIP = "gzip"  # the same, Content-Encoding: gzip: 2xx (then as NORMAL) or a final refusal
    BOMB = "bomb"  # a decompression bomb: refused, never forwarded, never 2xx


@dataclass(frozen=True, slots=True)
class Delivery:
    """One HTTP request of the simulated provider."""

    event_id: str
    kind: Kind
    replica: int
    sent: float
    elapsed: float | None  # until the answer was read, or until the error; None: not finished
    status: int | None  # None: no HTTP answer
    error: str | None = None  # why there was no answer (client exception)


@dataclass(slots=True)
class Receipt:
    """One request that reached the app (headers read), and what the app answered."""

    event_id: str
    attempt: int
    arrived: float
    status: int | None = None  # None: the app never answered (body not received, cancelled)
    answered: float | None = None  # when the app produced its answer
    destination: str = ""  # fan-out: the destination whose app this is ("": the one app)


@dataclass(frozen=True, slots=True)
class ForwardLog:
    """What a proxy replica logged about one forward of an event, at one attempt (0 when the
    line does not say: a delivery that died with an unexpected error logs no attempt)."""

    event_id: str
    attempt: int
    replica: int
    status: int | None = None  # what the replica answered the provider for this forward
    upstream_error: str | None = None  # the forward got no HTTP answer (timeout, reset, …)
    record_error: str | None = None  # the result could not be written
    superseded: bool = False  # a newer attempt took the row over before the result was written
    error: str | None = None  # the delivery ended in an unexpected error (a 500)
    provider: str = ""  # the queue the line is about (fan-out: ``stripe.<destination>``)


@dataclass(frozen=True, slots=True)
class Kill:
    """A replica SIGKILLed by the harness at ``at``, and when its replacement listened again
    (None: not restarted). Deliveries to it in between get no answer."""

    replica: int
    at: float
    back: float | None = None

    def covers(self, start: float, end: float) -> bool:
        """Whether the replica was dead (or dying) at some time in [start, end]."""
        return self.at <= end and (self.back is None or start <= self.back)


@dataclass(frozen=True, slots=True)
class Row:
    """An event row after quiescence."""

    event_id: str
    state: str
    attempt: int
    lease_expired: bool
    provider: str = "stripe"  # fan-out: the provider's own queue, or ``stripe.<destination>``


@dataclass(slots=True)
class History:
    """Everything one run observed. ``kinds`` names every event the provider sent."""

    kinds: Mapping[str, Kind]
    deliveries: Sequence[Delivery]
    receipts: Sequence[Receipt]
    forwards: Sequence[ForwardLog]
    rows: Sequence[Row]
    bound: float  # seconds: the longest any answer may take, derived from the config
    faults: Mapping[str, int] = field(default_factory=dict)  # what the harness injected
    expect_fault: bool = True  # False for a control run (no fault, every other check holds)
    proxy_errors: Sequence[str] = ()  # the replicas' log lines for unexpected errors
    replica_deaths: Sequence[str] = ()  # replicas that exited while the run went on
    kills: Sequence[Kill] = ()  # replicas the harness SIGKILLed (and restarted) on purpose
    queued: bool = False  # queue mode: a 2xx means stored; workers deliver it afterwards
    concurrency: int | None = None  # the provider's delivery.concurrency (None: no limit)
    lease: float = 0.0  # seconds: the provider's lease (a dead replica's permits' too)


_T = TypeVar("_T", Delivery, Receipt, ForwardLog)


def is_2xx(status: int | None) -> bool:
    return status is not None and 200 <= status < 300


def retryable(status: int | None) -> bool:
    """Whether a provider redelivers after this answer (None: no answer at all)."""
    return status is None or status >= 500 or status in RETRYABLE_4XX


def by_event(items: Iterable[_T]) -> dict[str, list[_T]]:
    grouped: dict[str, list[_T]] = defaultdict(list)
    for item in items:
        grouped[item.event_id].append(item)
    return grouped
