"""``webhook-sidecar events …``: inspect and repair event rows from the command line."""

from __future__ import annotations

import argparse
import getpass
import json
import os
import socket
import sys
from collections.abc import Callable
from typing import Any

from sidecar.cli.event_text import print_rows, show_text
from sidecar.config.loader import Secrets
from sidecar.config.model import Config
from sidecar.core.durations import parse_duration
from sidecar.core.errors import OperationError
from sidecar.obs.logs import get_logger
from sidecar.ops import events as operations
from sidecar.ops.listing import MAX_PAGE_LIMIT, OUTCOMES, PAGE_LIMIT, STATES, STATUS_CLASSES
from sidecar.ops.routes import named_key
from sidecar.runtime import loop as event_loop
from sidecar.runtime.stores import open_store

log = get_logger("sidecar.cli")


def configure_parser(parser: argparse.ArgumentParser,
                     with_config: Callable[[argparse.ArgumentParser], None]) -> None:
    sub = parser.add_subparsers(dest="events_command", required=True)
    listing = sub.add_parser("list", help="list events, newest first")
    with_config(listing)
    listing.add_argument("--provider", help="one provider's events, or one destination's "
                                            "(its key: stripe.billing)")
    listing.add_argument("--destination", metavar="NAME",
                         help="with --provider: that destination's events")
    listing.add_argument("--state", choices=STATES)
    listing.add_argument("--older-than", help="minimum age, e.g. 10m")
    listing.add_argument("--since", help="received at or after (ISO-8601 or epoch seconds)")
    listing.add_argument("--until", help="received before (ISO-8601 or epoch seconds)")
    listing.add_argument("--id-prefix", help="event ids starting with this")
    listing.add_argument("--status", choices=STATUS_CLASSES,
                         help="the app's last status class (none: no answer recorded)")
    listing.add_argument("--outcome", choices=OUTCOMES,
                         help="the last attempt's outcome (filtered: dropped by the "
                              "provider's filter, never forwarded)")
    listing.add_argument("--cursor", help="the next page: the cursor the previous page printed")
    listing.add_argument("--limit", type=int, default=PAGE_LIMIT,
                         help=f"rows per page, at most {MAX_PAGE_LIMIT}")
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    for name, text in (("show", "show one event"),
                       ("release", "release a failed event, or a processing one whose lease "
                                   "has expired: the next redelivery is forwarded")):
        one = sub.add_parser(name, help=text)
        with_config(one)
        one.add_argument("provider")
        one.add_argument("event_id")
        _destination_option(one)
        if name == "show":
            one.add_argument("--json", action="store_true",
                             help="one JSON object (stable fields) instead of the text view")
        if name == "release":
            one.add_argument("--force", action="store_true",
                             help="also release a processing event whose lease is still live "
                                  "(only once you know its process is gone: a redelivery "
                                  "then reaches the app while that attempt may still run)")
    redrive = sub.add_parser(
        "redrive", help="re-drive an event: a dead one (queue mode) goes back to its queue for "
                        "the running proxies' workers; a failed one (forward mode) is forwarded "
                        "now from its stored payload",
        description="PROVIDER EVENT_ID re-drives one event; PROVIDER --dead re-queues the "
                    "provider's dead events (queue mode), the running proxies deliver them. "
                    "With --destination NAME (or PROVIDER.NAME), the destination's.")
    with_config(redrive)
    redrive.add_argument("provider")
    redrive.add_argument("event_id", nargs="?")
    _destination_option(redrive)
    redrive.add_argument("--dead", action="store_true",
                         help="re-queue the provider's dead events (instead of one EVENT_ID)")
    redrive.add_argument("--older-than",
                         help="with --dead: only events received longer ago than this, e.g. 1h")
    redrive.add_argument("--limit", type=int,
                         help="with --dead: at most this many events (default "
                              f"{operations.REDRIVE_LIMIT})")


def _destination_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--destination", metavar="NAME",
                        help="one of the provider's destinations (fan-out): its queue, "
                             "PROVIDER.NAME")


EXIT_USAGE = 2  # as argparse's own usage errors


def secrets_needed(args: argparse.Namespace) -> Secrets:
    """The secrets the command reads from the config: none, so that an operator can inspect
    and repair events wherever the store is reachable (the provider secrets stay with the
    proxies), except the forward-signing keys for a re-drive, which forwards to the app."""
    if args.events_command == "redrive" and not args.dead:
        return Secrets.SIGNING
    return Secrets.NONE


def run(config: Config, args: argparse.Namespace) -> int:
    if args.events_command == "redrive" and (problem := _redrive_usage(args)):
        print(f"webhook-sidecar events redrive: error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    if args.events_command == "list" and args.destination and not args.provider:
        print("webhook-sidecar events list: error: --destination goes with --provider",
              file=sys.stderr)
        return EXIT_USAGE
    try:
        if args.events_command != "list":  # the destination's key; unknown ones fail here
            args.provider = named_key(config, args.provider, args.destination)
        return event_loop.run(_run(config, args))
    except OperationError as exc:
        print(f"webhook-sidecar: {exc}", file=sys.stderr)
        return 1


async def _run(config: Config, args: argparse.Namespace) -> int:
    store = await open_store(config.store)
    try:
        command = args.events_command
        if command == "list":
            params = {name: str(value) for name, value in (
                ("provider", args.provider), ("destination", args.destination),
                ("state", args.state), ("since", args.since),
                ("until", args.until), ("id_prefix", args.id_prefix), ("status", args.status),
                ("outcome", args.outcome), ("cursor", args.cursor), ("older_than", args.older_than),
                ("limit", args.limit)) if value is not None}
            page = await operations.list_page(store, operations.listing_query(config, params))
            print_rows(page["events"], as_json=args.json)
            if page["next"] is not None:  # on stderr: stdout stays one row per line
                print(f"next page: --cursor {page['next']}", file=sys.stderr)
        elif command == "show":
            shown = await operations.show(config, store, args.provider, args.event_id)
            print(json.dumps(shown, indent=2) if args.json else show_text(shown))
            # Logged once the payload is out: a reader gone already (a closed pipe) saw nothing.
            sys.stdout.flush()
            _log_read(args.provider, args.event_id, shown)
        elif command == "release":
            row = await operations.release(config, store, args.provider, args.event_id,
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


def _log_read(provider: str, event_id: str, shown: dict[str, Any]) -> None:
    """A stored payload read is logged as the inspector and the admin API log theirs (the CLI
    logs at warning and above only: this is one of its few lines)."""
    log.warning("cli_read", provider=provider, event_id=event_id,
                payload_stored=shown["payload_stored"], user=_user(), host=socket.gethostname(),
                pid=os.getpid())


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container's)
        return str(os.getuid())


def _redrive_usage(args: argparse.Namespace) -> str | None:
    if args.dead and args.event_id is not None:
        return "give either EVENT_ID or --dead, not both"
    if not args.dead and args.event_id is None:
        return ("give EVENT_ID, or --dead to re-queue the provider's dead events (a bulk "
                "re-drive is only for dead events)")
    if not args.dead and (args.older_than is not None or args.limit is not None):
        return "--older-than and --limit go with --dead"
    return None


async def _redrive(config: Config, store: Any, args: argparse.Namespace) -> int:
    if args.dead:
        older = (parse_duration(args.older_than, "--older-than")
                 if args.older_than else None)
        requeued = await operations.redrive_dead(
            config, store, args.provider, older_than=older,
            limit=args.limit if args.limit is not None else operations.REDRIVE_LIMIT)
        for event_id in requeued.event_ids:
            print(event_id)
        count = len(requeued.event_ids)
        print(f"re-queued {count} dead {args.provider} event{'' if count == 1 else 's'}: the "
              "running proxies' delivery workers deliver them", file=sys.stderr)
        return 0
    from sidecar.runtime.wiring import operator_forwarder  # the app client: only a re-drive

    owner = f"cli:{socket.gethostname()}:{os.getpid()}"
    async with operator_forwarder(config, store) as forwarder:
        result = await operations.redrive(config, store, forwarder, owner, args.provider,
                                          args.event_id)
    if isinstance(result, operations.Requeued):
        print(f"re-queued {args.provider}:{args.event_id} (it was dead): the running proxies' "
              "delivery workers deliver it, as the next attempt; follow it with events show")
        return 0
    answer = f"HTTP {result.status}" if result.status is not None else result.outcome
    print(f"re-drove {args.provider}:{args.event_id} as attempt {result.attempt}: the app "
          f"answered {answer}; the event is now {result.state}")
    return 0 if result.state == "done" else 1
