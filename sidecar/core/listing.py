"""The event listing's values (``events list``, the admin API, the inspector): what a page asks
for (``EventQuery``), the keyset cursor between pages (``PageKey``) and the page itself. Every
store pages alike; docs/design.md, "The event listing"."""

from __future__ import annotations

import base64
import enum
import json
from dataclasses import dataclass

from sidecar.core.events import EventRow, EventState, Outcome


class StatusClass(enum.StrEnum):
    """The class of the app's last HTTP status on a row, as the event listing filters by."""

    S2XX = "2xx"
    S3XX = "3xx"
    S4XX = "4xx"
    S5XX = "5xx"
    NONE = "none"  # no answer recorded (not tried yet, or no HTTP answer: timeout, refused…)


@dataclass(frozen=True, slots=True)
class PageKey:
    """Keyset cursor: the last row of a page; the next page holds strictly older rows in
    the order (received_at DESC, provider, event_id). Exact (microseconds as an int).

    Providers and event ids compare by code point (PostgreSQL's "C" collation, SQLite's BINARY,
    Python's ``str``), so every store pages alike."""

    received_us: int  # received_at in integer microseconds since the epoch
    provider: str
    event_id: str

    def encode(self) -> str:
        """Opaque URL-safe text (base64url of a small JSON array, unpadded)."""
        # ASCII JSON: an event id with a lone surrogate (a JSON body may carry one) encodes too.
        raw = json.dumps([self.received_us, self.provider, self.event_id],
                         separators=(",", ":")).encode("ascii")
        return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")

    @classmethod
    def decode(cls, text: str) -> PageKey:
        """The key :meth:`encode` gave; ``ValueError`` on anything else."""
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            parts = json.loads(raw.decode("utf-8"))
        except (ValueError, UnicodeError) as exc:  # binascii.Error is a ValueError
            raise ValueError("not a cursor this listing gave") from exc
        if not (isinstance(parts, list) and len(parts) == 3
                and type(parts[0]) is int and isinstance(parts[1], str)
                and isinstance(parts[2], str)):
            raise ValueError("not a cursor this listing gave")
        # Beyond int64 the databases cannot compare it (and no row is received there).
        if not -(2**63) <= parts[0] < 2**63:
            raise ValueError("cursor time out of range")
        return cls(parts[0], parts[1], parts[2])


@dataclass(frozen=True, slots=True)
class EventQuery:
    """One page of the event listing asked for: every filter given must hold (AND)."""

    providers: tuple[str, ...]  # which providers (callers pass every configured one)
    state: EventState | None = None
    received_after: float | None = None  # epoch seconds, inclusive
    received_before: float | None = None  # epoch seconds, exclusive
    id_prefix: str | None = None
    status_class: StatusClass | None = None
    outcome: Outcome | None = None  # the last attempt's outcome (filtered: dropped by a filter)
    after: PageKey | None = None  # the previous page's `next`
    limit: int = 50


@dataclass(frozen=True, slots=True)
class EventPage:
    """One page of the listing; ``next`` is the key to ask for the following (older) page."""

    rows: tuple[EventRow, ...]  # newest first
    next: PageKey | None  # None: no older rows
