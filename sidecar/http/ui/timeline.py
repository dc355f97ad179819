"""An event's attempts as the inspector lists them: every recorded attempt, and every attempt
number the row went through without a record (its process never wrote a result, or it was made
by a version that kept no attempts)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

NO_RESULT = ("not recorded (the lease ran out, the process stopped, or it predates the "
             "attempts timeline)")
IN_FLIGHT = "in flight now — its lease is live"


def timeline(event: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``event`` is ``ops.events.show()``'s answer. Each entry has ``attempt`` and either the
    recorded attempt's fields (``recorded`` True) or a ``note`` (no record). Ordered by attempt
    number, recorded attempts of one number (queue mode may repeat a number when a try did not
    reach the app) in the order they finished."""
    recorded = sorted(event.get("attempts") or [],
                      key=lambda a: (a["attempt"], a["finished_at"]))
    numbers = {a["attempt"] for a in recorded}
    entries: list[dict[str, Any]] = [{**a, "recorded": True} for a in recorded]
    current = int(event["attempt"])
    for number in range(1, current + 1):
        if number in numbers:
            continue
        live = number == current and event["state"] == "processing" and event["lease_live"]
        entries.append({"attempt": number, "recorded": False,
                        "note": IN_FLIGHT if live else NO_RESULT})
    entries.sort(key=lambda e: (e["attempt"], not e["recorded"], e.get("finished_at") or 0.0))
    return entries
