"""``webhook-sidecar events …``: inspect and repair event rows from the command line."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
from collections.abc import Callable
from typing import Any

from sidecar import operations
from sidecar.app import open_store
from sidecar.config.keyring import Keyring
from sidecar.config.model import Config
from sidecar.core.durations import parse_duration
from sidecar.forwarding import Forwarder
from sidecar.obs.metrics import Metrics
from sidecar.upstream import Upstream


def configure_parser(parser: argparse.ArgumentParser,
                     with_config: Callable[[argparse.ArgumentParser], None]) -> None:
    sub = parser.add_subparsers(dest="events_command", required=True)
    listing = sub.add_parser("list", help="list events, newest first")
    with_config(listing)
    listing.add_argument("--provider")
    listing.add_argument("--state", choices=["processing", "done", "failed"])
    listing.add_argument("--older-than", help="minimum age, e.g. 10m")
    listing.add_argument("--limit", type=int, default=100)
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    for name, text in (("show", "show one event"),
                       ("release", "release a failed event, or a processing one whose lease "
                                   "has expired: the next redelivery is forwarded"),
                       ("redrive", "forward a failed event again from its stored payload")):
        one = sub.add_parser(name, help=text)
        with_config(one)
        one.add_argument("provider")
        one.add_argument("event_id")
        if name == "show":
            one.add_argument("--json", action="store_true",
                             help="one JSON object (stable fields) instead of the text view")
        if name == "release":
            one.add_argument("--force", action="store_true",
                             help="also release a processing event whose lease is still live "
                                  "(only once you know its process is gone: a redelivery "
                                  "then reaches the app while that attempt may still run)")


def run(config: Config, args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_run(config, args))
    except operations.OperationError as exc:
        print(f"webhook-sidecar: {exc}", file=sys.stderr)
        return 1


async def _run(config: Config, args: argparse.Namespace) -> int:
    store = await open_store(config.store)
    try:
        command = args.events_command
        if command == "list":
            older = (parse_duration(args.older_than, "--older-than")
                     if args.older_than else None)
            rows = await operations.list_events(store, provider=args.provider, state=args.state,
                                                older_than=older, limit=args.limit)
            _print_rows(rows, as_json=args.json)
        elif command == "show":
            shown = await operations.show(store, args.provider, args.event_id)
            print(json.dumps(shown, indent=2) if args.json else _show_text(shown))
        elif command == "release":
            row = await operations.release(store, args.provider, args.event_id,
                                           force=args.force)
            if row["forced_live_lease"]:
                print(f"webhook-sidecar: warning: released {args.provider}:{args.event_id} "
                      f"while its lease was live (--force): if attempt {row['attempt']} is "
                      "still running, a redelivery now reaches the app at the same time",
                      file=sys.stderr)
            print(f"released {args.provider}:{args.event_id} (state {row['state']}, attempt "
                  f"{row['attempt']}): the next redelivery is forwarded as attempt "
                  f"{row['attempt'] + 1}")
        else:
            return await _redrive(config, store, args)
    finally:
        await store.close()
    return 0


async def _redrive(config: Config, store: Any, args: argparse.Namespace) -> int:
    upstream = Upstream(config.upstream)
    await upstream.start()
    pending: set[asyncio.Task[bool]] = set()
    try:
        owner = f"cli:{socket.gethostname()}:{os.getpid()}"
        keyring = Keyring(config.providers, config.upstream.signing_secrets)
        forwarder = Forwarder(store, upstream, Metrics(), pending,
                              signing_keys=keyring.signing_keys)
        result = await operations.redrive(config, store, forwarder, owner, args.provider,
                                          args.event_id)
    finally:
        await upstream.close()
    answer = f"HTTP {result.status}" if result.status is not None else result.outcome
    print(f"re-drove {args.provider}:{args.event_id} as attempt {result.attempt}: the app "
          f"answered {answer}; the event is now {result.state}")
    return 0 if result.state == "done" else 1


def _print_rows(rows: list[dict[str, Any]], *, as_json: bool) -> None:
    if as_json:
        for row in rows:
            print(json.dumps(row))
        return
    print(f"{'PROVIDER':<16} {'EVENT ID':<40} {'STATE':<11} {'ATTEMPT':>7} {'AGE':>10} "
          f"{'STATUS':>6}")
    for row in rows:
        status = row["response_status"] if row["response_status"] is not None else "-"
        print(f"{row['provider']:<16} {row['event_id']:<40} {row['state']:<11} "
              f"{row['attempt']:>7} {_age(row['age_seconds']):>10} {status!s:>6}")


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.1f}s"


def _show_text(row: dict[str, Any]) -> str:
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
