"""What the replicas logged about each forward, read back from their JSON log lines."""

from __future__ import annotations

from collections.abc import Sequence

from bench.chaos.history import ForwardLog
from tests.support import ProxyProcess

# Queue mode: a delivery worker's line per try, and its settlement that could not be written.
QUEUE_TRIES = ("queue_delivery", "queue_dead")
QUEUE_UNWRITTEN = "queue_record_failed"


def from_logs(replicas: Sequence[tuple[int, ProxyProcess]],
              ) -> tuple[list[ForwardLog], list[str], list[str]]:
    """Per forward, what the replicas (each with its index; a killed replica and its
    replacement share one) logged: delivery lines that forwarded, failed result writes,
    superseded results, queue workers' tries; the log lines of unexpected errors; other
    notes."""
    forwards: list[ForwardLog] = []
    errors: list[str] = []
    notes: list[str] = []
    for index, replica in replicas:
        for entry in replica.logs:
            event, event_id, attempt = (entry.get("event"), entry.get("event_id"),
                                        entry.get("attempt"))
            queue = str(entry.get("provider") or "")
            if event == "sabotage":
                notes.append(f"replica {index}: sabotaged build ({entry.get('name')})")
            unexpected = entry.get("result") == "error" or (
                entry.get("level") in ("error", "critical")
                and event not in ("record_failed", QUEUE_UNWRITTEN))
            if unexpected:
                cause = str(entry.get("exception") or entry.get("error") or "").strip()
                cause = cause.splitlines()[-1] if cause else ""
                errors.append(f"replica {index}: {event} {event_id or ''} {cause}".strip())
                if isinstance(event_id, str) and event in ("delivery", "queue_delivery_crashed"):
                    forwards.append(ForwardLog(event_id, attempt or 0, index,
                                               entry.get("status"), error=cause or "error",
                                               provider=queue))
                    continue
            if not isinstance(event_id, str) or not isinstance(attempt, int):
                continue
            if event == "delivery" and ({"upstream_ms", "upstream_error", "record_error"}
                                        & entry.keys()):
                forwards.append(ForwardLog(event_id, attempt, index, entry.get("status"),
                                           entry.get("upstream_error"),
                                           entry.get("record_error"),
                                           bool(entry.get("superseded")), provider=queue))
            elif event == "record_failed":
                forwards.append(ForwardLog(event_id, attempt, index,
                                           record_error=str(entry.get("error")),
                                           provider=queue))
            elif event == "attempt_superseded":
                forwards.append(ForwardLog(event_id, attempt, index, superseded=True,
                                           provider=queue))
            elif event in QUEUE_TRIES and entry.get("result") != "unreachable":
                # (an unreachable try is no attempt: the app was not connected to, and the
                # attempt number is given back for the next try)
                answered = entry.get("app_status_class") not in (None, "none")
                forwards.append(ForwardLog(
                    event_id, attempt, index,
                    upstream_error=None if answered else entry.get("upstream_error"),
                    superseded=entry.get("result") == "superseded", provider=queue))
            elif event == QUEUE_UNWRITTEN:
                forwards.append(ForwardLog(event_id, attempt, index,
                                           record_error="settlement not written",
                                           provider=queue))
        stray = [line for line in replica.raw_logs if not line.startswith("{")]
        if stray:
            notes.append(f"replica {index}: {len(stray)} non-JSON stderr lines, e.g. "
                         f"{stray[-1][:160]!r}")
    return forwards, errors, notes
