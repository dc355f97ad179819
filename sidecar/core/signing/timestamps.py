"""Signed timestamps: read as received (a header, the signature header or the verified JSON
body), checked against the clock within a tolerance, and written when signing. ``now`` is
always passed in.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime

from sidecar.core.body import NotJson, parse_json
from sidecar.core.errors import VerificationError
from sidecar.core.jsonpath import JsonPath
from sidecar.core.signing.spec import TimestampSpec

# Integer timestamps in ASCII digits only: int() would also take "+1", " 1", "1_0" and the
# digits of other scripts.
# 18 digits keep even millisecond values far from any overflow.
_TIMESTAMP = re.compile(r"[0-9]{1,18}")
# RFC 3339 date-time (Twitch sends nanoseconds); ASCII digits only.
_RFC3339 = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]{1,9})?"
    r"([Zz]|[+-][0-9]{2}:[0-9]{2})"
)


def parse_rfc3339(text: str) -> float:
    """Seconds since the epoch of an RFC 3339 date-time (``2023-03-01T12:34:56.123456789Z``);
    ``VerificationError("bad_timestamp")`` for anything else."""
    match = _RFC3339.fullmatch(text)
    if match is None:
        raise VerificationError("bad_timestamp", "not an RFC 3339 date-time")
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    try:
        moment = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second),
                          tzinfo=UTC)
    except ValueError:
        raise VerificationError("bad_timestamp", "not a valid date-time") from None
    offset = 0
    if zone not in ("Z", "z"):
        sign = -1 if zone[0] == "-" else 1
        hours, minutes = int(zone[1:3]), int(zone[4:6])
        if hours > 23 or minutes > 59:
            raise VerificationError("bad_timestamp", "bad UTC offset")
        offset = sign * (hours * 3600 + minutes * 60)
    seconds = moment.timestamp() - offset
    if fraction:
        seconds += int(fraction[1:]) / 10 ** (len(fraction) - 1)
    return seconds


def check_timestamp(rule: TimestampSpec, text: str | None, now: float) -> None:
    """Reject a missing, malformed, too old or (``direction: both``) too new timestamp."""
    if not text:
        raise VerificationError("missing_timestamp")
    if rule.unit == "rfc3339":
        seconds = parse_rfc3339(text)
    else:
        if not _TIMESTAMP.fullmatch(text):
            raise VerificationError("bad_timestamp", "not an integer")
        seconds = int(text) / 1000 if rule.unit == "ms" else int(text)
    age = now - seconds
    # Written as "not within" so that a NaN clock rejects instead of accepting everything.
    if not age <= rule.tolerance:
        raise VerificationError("stale_timestamp", f"{age:.0f}s old")
    if rule.direction == "both" and not -age <= rule.tolerance:
        raise VerificationError("future_timestamp", f"{-age:.0f}s ahead")


def body_timestamp(rule: TimestampSpec, path: JsonPath, body: bytes) -> str | None:
    """The timestamp at ``path`` in a JSON body as text, ``None`` when absent
    (``missing_timestamp``). Unix seconds or milliseconds must be a JSON integer (as Linear's
    SDK wants a number), an RFC 3339 time a string; anything else is refused by
    ``check_timestamp`` as ``bad_timestamp``."""
    try:
        found, value = path.lookup(parse_json(body))
    except NotJson:
        return None
    if not found or value is None:
        return None
    if rule.unit == "rfc3339":
        return value if isinstance(value, str) else "not a string"
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return "not an integer"


def timestamp_text(unit: str, now: float) -> str:
    """``now`` as a provider would write it in ``unit`` (``s``, ``ms`` or ``rfc3339``)."""
    if unit == "ms":
        return str(math.floor(now * 1000))
    if unit == "rfc3339":
        moment = datetime.fromtimestamp(math.floor(now * 1_000_000) / 1_000_000, tz=UTC)
        return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return str(math.floor(now))
