"""What the pipeline is given at start-up besides its store (``core.ports.DeliveryStore``): the
forwarder, the keyring and an observer, each as the little it needs of them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from sidecar.config.model import ProviderConfig
from sidecar.core.breaker import Admitted, Held, ProbeEnd
from sidecar.core.events import AttemptResult, Forwarded, RecordedResponse, StoredRequest


class Forwarding(Protocol):
    """Forwards ``request`` once on behalf of ``rows`` (``(event_id, attempt)``) and records the
    result on each row (``sidecar.forwarding.forwarder.Forwarder``)."""

    async def forward(self, provider: ProviderConfig, rows: Sequence[tuple[str, int]],
                      request: StoredRequest) -> Forwarded: ...

    async def send(self, provider: ProviderConfig, ids: Sequence[str], attempt: int,
                   request: StoredRequest, *, unclaimed: bool = False) -> Sent:
        """Send once, record nothing (``unclaimed``: no row holds these events, the store
        could not be reached; the app is told so)."""
        ...


class Sent(Protocol):
    """One send to the app, classified (``sidecar.forwarding.forwarder.Sent``)."""

    @property
    def result(self) -> AttemptResult: ...

    @property
    def response(self) -> RecordedResponse | None: ...

    @property
    def error(self) -> str | None: ...


class Observer(Protocol):
    """What the pipeline reports besides its answer (metrics and warnings)."""

    def claimed(self, provider: str, seconds: float) -> None: ...

    def payload_mismatch(self, provider: str, event_id: str) -> None: ...

    def limited(self, provider: str, limit: str) -> None: ...
    def unclaimed_forward(self, provider: str, event_ids: tuple[str, ...], error: str
                          ) -> None: ...


class Keys(Protocol):
    def key_bytes(self, provider: str) -> tuple[bytes, ...]: ...


class Holds(Protocol):
    """Whether a provider's deliveries may go ahead (paused, its breaker), and how an admitted
    one's attempt ended (``sidecar.forwarding.holds.Holds``)."""

    async def admit(self, provider: ProviderConfig) -> Admitted | Held: ...

    async def ended(self, provider: ProviderConfig, admitted: Admitted, end: ProbeEnd,
                    why: str) -> None: ...


class NoHolds:
    """Nothing is ever held (the pipeline's default, for tests that do not need holds)."""

    async def admit(self, provider: ProviderConfig) -> Admitted | Held:
        return Admitted()

    async def ended(self, provider: ProviderConfig, admitted: Admitted, end: ProbeEnd,
                    why: str) -> None:
        pass
