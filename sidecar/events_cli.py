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
                       ("release", "release a stuck or failed event: the next redelivery is "
                                   "forwarded"),
                       ("redrive", "forward a failed event again from its stored payload")):
        one = sub.add_parser(name, help=text)
        with_config(one)
        one.add_argument("provider")
        one.add_argument("event_id")


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
            print(json.dumps(await operations.show(store, args.provider, args.event_id),
                             indent=2))
        elif command == "release":
            row = await operations.release(store, args.provider, args.event_id)
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
        result = await operations.redrive(config, store, Forwarder(store, upstream, Metrics(),
                                                                   pending),
                                          owner, args.provider, args.event_id)
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
