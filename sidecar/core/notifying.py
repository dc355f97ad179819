"""Notifications as values: the message a target receives (Standard Webhooks or Slack), what a
try's outcome means (sent, try again, give up), and the two conditions the proxy notices itself
(dead letters reaching a threshold, signatures starting to fail). No I/O: the sender is
``sidecar.ops.notify``; the rule "once per condition and interval" is the store's
(``NoticeStore.claim_notice``). Why it is built this way: docs/design.md, "Notifications"."""

from __future__ import annotations

import enum
import hashlib
import json
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from sidecar.core.durations import format_duration
from sidecar.core.notices import Notice, NoticeKind

# The type of the message ``webhook-sidecar notify test`` sends; not a condition.
TEST_TYPE: Final = "notify.test"

# A message is tried at most this often; the waits between tries double from FIRST_RETRY up to
# MAX_RETRY (an answer's Retry-After is followed up to MAX_RETRY too).
MAX_TRIES: Final = 5
FIRST_RETRY: Final = 0.5
MAX_RETRY: Final = 30.0


def target_id(url: str, form: str) -> str:
    """The store's name for a target: a digest, never the URL (a Slack URL carries its
    token)."""
    return hashlib.sha256(f"{form} {url}".encode()).hexdigest()[:32]


def rfc3339(epoch: float) -> str:
    """``2026-12-03T13:27:00.123Z``: the message's ``timestamp`` field."""
    return (datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"))


@dataclass(frozen=True, slots=True)
class Message:
    """One message, the same on each of its tries: ``type`` is a ``NoticeKind`` value (or
    ``TEST_TYPE``), ``at`` when the condition was noticed (epoch seconds)."""

    type: str
    provider: str
    detail: Mapping[str, object]
    at: float

    @classmethod
    def of(cls, notice: Notice, at: float) -> Message:
        return cls(NoticeKind(notice.kind).value, notice.provider, dict(notice.detail), at)

    def standard_body(self) -> bytes:
        """The Standard Webhooks payload: ``{"type", "timestamp", "data": {"provider", …}}``."""
        data = {"provider": self.provider, **self.detail}
        return json.dumps({"type": self.type, "timestamp": rfc3339(self.at), "data": data},
                          separators=(",", ":"), sort_keys=False, default=str).encode()

    def slack_body(self) -> bytes:
        """A Slack incoming webhook's payload: ``{"text": …}``, the summary and each detail."""
        lines = [f"*webhook-sidecar*: {self.summary()}"]
        lines += [f"• {key}: {value}" for key, value in self.detail.items()]
        return json.dumps({"text": "\n".join(lines)}, default=str).encode()

    def summary(self) -> str:
        """One sentence a person reads."""
        provider, detail = self.provider, self.detail
        match self.type:
            case NoticeKind.PAUSED:
                return f"deliveries of provider {provider} are paused"
            case NoticeKind.RESUMED:
                return f"deliveries of provider {provider} resumed"
            case NoticeKind.BREAKER_OPENED:
                return f"the circuit breaker of provider {provider} opened"
            case NoticeKind.BREAKER_CLOSED:
                return f"the circuit breaker of provider {provider} closed"
            case NoticeKind.DEAD_LETTERS:
                return (f"provider {provider} has {detail.get('dead')} dead events "
                        f"(threshold {detail.get('threshold')})")
            case NoticeKind.SIGNATURE_FAILURES:
                return (f"{detail.get('failures')} deliveries of provider {provider} failed "
                        f"signature verification within {detail.get('window')}")
            case _:
                return f"a test message (provider {provider})"


class TryResult(enum.Enum):
    SENT = "sent"  # 2xx
    AGAIN = "again"  # no answer, 5xx or 429: worth another try
    REFUSED = "refused"  # any other status: another try would be refused alike


def try_result(status: int | None) -> TryResult:
    """What one try's answer means (``None``: no answer: refused, reset, timed out)."""
    if status is None or status == 429 or status >= 500:
        return TryResult.AGAIN
    if 200 <= status < 300:
        return TryResult.SENT
    return TryResult.REFUSED


def retry_delay(tries: int, retry_after: float | None = None) -> float:
    """Seconds to wait after the ``tries``-th failed try: doubling from ``FIRST_RETRY``, or the
    answer's Retry-After, at most ``MAX_RETRY`` either way."""
    if retry_after is not None and retry_after >= 0:
        return float(min(retry_after, MAX_RETRY))
    return float(min(FIRST_RETRY * 2.0 ** (tries - 1), MAX_RETRY))


class DeadLetters:
    """Dead letters reaching ``threshold``: a notice when a provider's dead count goes from
    below the threshold to at or above it; armed again once it is below. A process's first
    reading above the threshold counts as a start (the store keeps it to one per interval)."""

    def __init__(self, threshold: int) -> None:
        self._threshold = threshold
        self._above: set[str] = set()

    def observe(self, dead: Mapping[str, int]) -> list[Notice]:
        """``dead``: every watched provider's dead count now (a provider left out has none)."""
        notices = []
        for provider, count in dead.items():
            if count < self._threshold:
                self._above.discard(provider)
            elif provider not in self._above:
                self._above.add(provider)
                notices.append(Notice(NoticeKind.DEAD_LETTERS, provider,
                                      {"dead": count, "threshold": self._threshold}))
        for provider in self._above - set(dead):
            self._above.discard(provider)
        return notices


class SignatureFailures:
    """Signatures starting to fail: a notice when ``count`` deliveries of a provider failed
    verification within ``window`` seconds; armed again once fewer than ``count`` fall in the
    window. Keeps the last ``count`` failure times per provider, nothing more."""

    def __init__(self, count: int, window: float) -> None:
        self._count = count
        self._window = window
        self._times: dict[str, deque[float]] = {}
        self._failing: set[str] = set()

    def failed(self, provider: str, now: float) -> Notice | None:
        times = self._times.setdefault(provider, deque(maxlen=self._count))
        if provider in self._failing and times and now - times[0] > self._window:
            self._failing.discard(provider)  # the window emptied below the count: re-armed
        times.append(now)
        if (len(times) < self._count or now - times[0] > self._window
                or provider in self._failing):
            return None
        self._failing.add(provider)
        return Notice(NoticeKind.SIGNATURE_FAILURES, provider,
                      {"failures": self._count, "window": format_duration(self._window)})
