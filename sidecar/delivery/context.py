"""The values of one delivery: the request as the HTTP shell received it (``Inbound``), and the
frozen context every step of the pipeline takes (``Delivery``) with the one thing in it that
the steps add to as they go, the trace of its log line."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sidecar.config.model import ProviderConfig
from sidecar.core.answers import Answer
from sidecar.core.body import Body
from sidecar.core.eventid import BatchItem
from sidecar.core.events import Guard


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


class Trace:
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
                      log, answer.encoded)


@dataclass(frozen=True, slots=True)
class Delivery:
    """One delivery as the steps see it: the provider's config, the request as received, its
    body (parsed and hashed at most once, ``core.body``), the items its event ids name (none
    before the event-id step: ``with_items``), the trace its log line is made from, and the
    replay guard's binding while it is still to be made (``with_guard``)."""

    provider: ProviderConfig
    inbound: Inbound
    body: Body
    trace: Trace = field(default_factory=Trace)
    items: tuple[BatchItem, ...] = ()
    # The replay guard's binding, still to be made (``Steps.admit``): the mode makes it with
    # its claim (``DeliveryStore.claim_guarded``), or alone (``Steps.bind_guard``).
    guard: Guard | None = None
    # The positions of the items the provider's filter drops (``delivery.filtering``): claimed
    # and recorded as filtered, never forwarded.
    dropped: frozenset[int] = frozenset()

    @property
    def key(self) -> str:
        """The provider's key: what the store, the metrics and the memory file it under."""
        return self.provider.key

    def with_items(self, items: Sequence[BatchItem]) -> Delivery:
        # Not dataclasses.replace: this is on every delivery's path, and replace is slower.
        return Delivery(self.provider, self.inbound, self.body, self.trace, tuple(items),
                        self.guard, self.dropped)

    def with_guard(self, guard: Guard | None) -> Delivery:
        return Delivery(self.provider, self.inbound, self.body, self.trace, self.items, guard,
                        self.dropped)

    def with_dropped(self, dropped: frozenset[int]) -> Delivery:
        return Delivery(self.provider, self.inbound, self.body, self.trace, self.items,
                        self.guard, dropped)
