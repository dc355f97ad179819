"""What the pipeline is given at start-up besides its store (``core.ports.DeliveryStore``): the
forwarder, the keyring and an observer, each as the little it needs of them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from sidecar.config.model import ProviderConfig
from sidecar.core.events import Forwarded, StoredRequest


class Forwarding(Protocol):
    """Forwards ``request`` once on behalf of ``rows`` (``(event_id, attempt)``) and records the
    result on each row (``sidecar.forwarding.forwarder.Forwarder``)."""

    async def forward(self, provider: ProviderConfig, rows: Sequence[tuple[str, int]],
                      request: StoredRequest) -> Forwarded: ...


class Observer(Protocol):
    """What the pipeline reports besides its answer (metrics and warnings)."""

    def claimed(self, provider: str, seconds: float) -> None: ...

    def payload_mismatch(self, provider: str, event_id: str) -> None: ...

    def limited(self, provider: str, limit: str) -> None: ...


class Keys(Protocol):
    def key_bytes(self, provider: str) -> tuple[bytes, ...]: ...
