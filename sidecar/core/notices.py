"""What the proxy tells people about without Prometheus: a provider paused or resumed, its
breaker opened or closed, its dead letters past a threshold, its signatures failing. The parts
that notice a condition hand a ``Notice`` to a ``Notices`` port; sending it (to the ``notify:``
targets, at most once per condition and interval, retried) is the port's business and never
the delivery path's."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol


class NoticeKind(StrEnum):
    PAUSED = "provider.paused"
    RESUMED = "provider.resumed"
    BREAKER_OPENED = "breaker.opened"
    BREAKER_CLOSED = "breaker.closed"
    DEAD_LETTERS = "dead_letters.threshold"
    SIGNATURE_FAILURES = "signatures.failing"


@dataclass(frozen=True, slots=True)
class Notice:
    """One condition of one provider; ``detail`` is JSON-ready (why, counts, since when)."""

    kind: NoticeKind
    provider: str
    detail: Mapping[str, object] = field(default_factory=dict)


class Notices(Protocol):
    def notice(self, notice: Notice) -> None:
        """Hand a notice over; never blocks, never raises."""


class NoNotices:
    """Notices with no ``notify:`` targets: dropped."""

    def notice(self, notice: Notice) -> None:
        pass
