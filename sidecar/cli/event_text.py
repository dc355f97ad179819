"""How ``webhook-sidecar events`` prints rows: a listing's table (or JSON lines), and one event's
readable view with its queue entry, attempts and stored bodies."""

from __future__ import annotations

import json
from typing import Any


def print_rows(rows: list[dict[str, Any]], *, as_json: bool) -> None:
    if as_json:
        for row in rows:
            print(json.dumps(row))
        return
    print(f"{'PROVIDER':<16} {'EVENT ID':<40} {'STATE':<11} {'ATTEMPT':>7} {'AGE':>10} "
          f"{'STATUS':>8}")
    for row in rows:
        status = ("filtered" if row["outcome"] == "filtered"  # the app never answered
                  else row["response_status"] if row["response_status"] is not None else "-")
        print(f"{row['provider']:<16} {row['event_id']:<40} {row['state']:<11} "
              f"{row['attempt']:>7} {_age(row['age_seconds']):>10} {status!s:>8}")


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.1f}s"


def show_text(row: dict[str, Any]) -> str:
    """``events show`` for a person: times in ISO-8601 UTC with their age, bodies as text."""
    lines = [
        f"{row['provider']}:{row['event_id']}",
        f"  state       {row['state']} (attempt {row['attempt']})",
        f"  received    {row['received_at_iso']} ({_age(row['age_seconds'])} ago)",
        f"  updated     {row['updated_at_iso']} ({_age(row['updated_seconds_ago'])} ago)",
    ]
    if row["lease_until_iso"] is None:
        lines.append("  lease       none")
    else:
        left = row["lease_seconds_left"]
        when = (f"live, {_age(left)} left" if row["lease_live"]
                else f"expired {_age(-left)} ago")
        lines.append(f"  lease       until {row['lease_until_iso']} ({when})")
    if row["outcome"] is not None:
        answer = (f"HTTP {row['response_status']}" if row["response_status"] is not None
                  else row["outcome"])
        latency = f" in {row['latency_ms']:g} ms" if row["latency_ms"] is not None else ""
        lines.append(f"  outcome     {row['outcome']}: {answer}{latency}")
    queue = row.get("queue")
    if queue is not None:
        lines += _queue_text(queue)
    lines += _attempts_text(row.get("attempts") or [])
    lines += _fan_out_text(row)
    lines.append(f"  body sha256 {row['body_sha256']}")
    if "response_headers" in row:
        lines.append("  response headers")
        lines += [f"    {_safe(name)}: {_safe(value)}" for name, value in row["response_headers"]]
        lines += _body("  response body", row["response_body_text"],
                       row["response_body_base64"])
    request = row.get("request")
    if request is None:
        lines.append("  request     not stored (store_payload is off for this provider)")
    else:
        lines.append(f"  request     {request['method']} {_safe(request['path'])}")
        lines += [f"    {_safe(name)}: {_safe(value)}" for name, value in request["headers"]]
        lines += _body("  request body", request["body_text"], request["body_base64"])
    return "\n".join(lines)


def _queue_text(queue: dict[str, Any]) -> list[str]:
    """The queue entry (queue mode): when the event is due, or that it is dead."""
    if queue["dead"]:
        when = "dead: no more tries until re-driven (events redrive)"
    elif queue["due_in_seconds"] > 0:
        when = f"due {queue['due_at_iso']} (in {_age(queue['due_in_seconds'])})"
    else:
        when = f"due since {queue['due_at_iso']} ({_age(-queue['due_in_seconds'])} ago)"
    lines = [f"  queue       {when}; taken {queue['tries']} time"
             f"{'' if queue['tries'] == 1 else 's'}",
             f"  queued      {queue['queued_at_iso']} "
             f"({_age(queue['queued_seconds_ago'])} ago)"]
    if queue["order_key"] is not None:
        lines.append(f"  order key   {_safe(queue['order_key'])}")
    if queue["last_error"] is not None:
        lines.append(f"  last error  {_safe(queue['last_error'])}")
    return lines


def _attempts_text(attempts: list[dict[str, Any]]) -> list[str]:
    """The timeline, one line per recorded attempt, oldest first: when it started, how long it
    took, the app's answer or the error, what the event became, and which process made it."""
    if not attempts:
        return ["  attempts    none recorded"]
    lines = [f"  attempts    {len(attempts)}"]
    for a in attempts:
        answer = f"HTTP {a['status']}" if a["status"] is not None else a["outcome"]
        if a["error"] is not None:
            answer += f" ({_safe(a['error'])})"
        owner = f" by {_safe(a['owner'])}" if a["owner"] is not None else ""
        lines.append(f"    #{a['attempt']:<3} {a['started_at_iso']} {a['duration_ms']:>9.1f} ms  "
                     f"{answer} -> {a['state']}{owner}")
    return lines


def _fan_out_text(row: dict[str, Any]) -> list[str]:
    """A fanning-out provider's event: each destination's state and last answer (each has its
    own ``events show``); a destination's event: whose it is."""
    origin = row.get("fanned_out_from")
    if origin is not None:
        return [f"  fan-out     destination {_safe(origin['destination'])} of "
                f"{_safe(origin['provider'])}:{_safe(row['event_id'])}"]
    destinations = row.get("destinations")
    if destinations is None:
        return []
    if not destinations:
        return ["  destinations none (every destination's filter dropped it)"]
    lines = [f"  destinations {len(destinations)} (events show {_safe(row['provider'])} "
             f"{_safe(row['event_id'])} --destination NAME)"]
    width = max(len(d["destination"]) for d in destinations)
    for d in destinations:
        event = d["event"]
        if event is None:
            lines.append(f"    {d['destination']:<{width}}  not queued yet")
            continue
        answer = (f"HTTP {event['response_status']}" if event["response_status"] is not None
                  else event["outcome"] or "no answer yet")
        lines.append(f"    {d['destination']:<{width}}  {event['state']} (attempt "
                     f"{event['attempt']}): {answer}")
    return lines


def _body(title: str, text: str | None, b64: str | None) -> list[str]:
    if text is None:
        return [f"{title} (base64, not UTF-8)", f"    {b64}"]
    if not text:
        return [f"{title} (empty)"]
    return [title, *(f"    {_safe(line)}" for line in text.splitlines())]


def _safe(text: str) -> str:
    """Control characters (a terminal escape sequence in a body) and undecodable bytes kept
    as header values shown as Python escapes, never sent to the terminal as they are."""
    return "".join(c if c.isprintable() or c == "\t" else repr(c)[1:-1] for c in text)
