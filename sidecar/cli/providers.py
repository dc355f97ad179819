"""``webhook-sidecar providers …``: see each provider's hold state (paused, its circuit
breaker), pause and resume its deliveries in every replica sharing the store."""

from __future__ import annotations

import argparse
import getpass
import json
import os
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

from sidecar.config.model import Config
from sidecar.core.errors import OperationError
from sidecar.ops import providers as operations
from sidecar.runtime import loop as event_loop
from sidecar.runtime.stores import open_store

EXIT_USAGE = 2  # as argparse's own usage errors: an unknown provider


def configure_parser(parser: argparse.ArgumentParser,
                     with_config: Callable[[argparse.ArgumentParser], None]) -> None:
    sub = parser.add_subparsers(dest="providers_command", required=True)
    status = sub.add_parser("status", help="each provider's state: paused, its breaker")
    with_config(status)
    status.add_argument("name", nargs="?", help="one provider, or one destination by its key "
                                                "(stripe.billing) (default: all, destinations "
                                                "included)")
    _destination_option(status)
    status.add_argument("--json", action="store_true", help="one JSON object per line")
    pause = sub.add_parser(
        "pause", help="pause a provider's deliveries in every replica (queue mode: events "
                      "are still accepted and wait; forward mode: answered 503 + Retry-After)")
    with_config(pause)
    pause.add_argument("name")
    _destination_option(pause)
    pause.add_argument("--reason", default="", help="why, shown in status and the inspector")
    pause.add_argument("--force", action="store_true",
                       help="pause a forward-mode provider that does not retry (e.g. GitHub): "
                            "its deliveries while paused are lost")
    resume = sub.add_parser("resume", help="resume a paused provider's deliveries")
    with_config(resume)
    resume.add_argument("name")
    _destination_option(resume)


def _destination_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--destination", metavar="NAME",
                        help="one of the provider's destinations (fan-out) alone "
                             "(PROVIDER.NAME names it too)")


def run(config: Config, args: argparse.Namespace) -> int:
    if args.destination and args.name is None:
        print(f"webhook-sidecar providers {args.providers_command}: error: --destination goes "
              "with the provider's name", file=sys.stderr)
        return EXIT_USAGE
    try:
        if args.destination:  # its key; an unknown one fails before the store is opened
            args.name = operations.provider_config(config, args.name, args.destination).key
        return event_loop.run(_run(config, args))
    except OperationError as exc:
        print(f"webhook-sidecar providers {args.providers_command}: error: {exc}",
              file=sys.stderr)
        return EXIT_USAGE if exc.status == 404 else 1


async def _run(config: Config, args: argparse.Namespace) -> int:
    from sidecar.runtime.wiring import open_notices  # the server's parts: pause and resume only

    if args.providers_command != "status":  # an unknown name fails before the store is opened
        operations.provider_config(config, args.name)
    store = await open_store(config.store)
    try:
        command = args.providers_command
        if command == "status":
            shown = await operations.status(config, store, args.name)
            if args.json:
                for row in shown:
                    print(json.dumps(row))
            else:
                print("\n".join(status_text(row, time.time()) for row in shown))
        elif command == "pause":
            async with open_notices(config, store) as notices:
                row = await operations.pause(config, store, notices, args.name, by=_who(),
                                             reason=args.reason, force=args.force)
            if not row["changed"]:
                print(f"{args.name} was already paused (since {row['paused_at_iso']} by "
                      f"{row['paused_by']}); nothing changed")
            else:
                print(f"paused {args.name}: every replica stops delivering within a second "
                      + ("(events are still accepted and wait)" if row["mode"] == "queue"
                         else "(deliveries are answered 503 + Retry-After)"))
        else:
            async with open_notices(config, store) as notices:
                row = await operations.resume(config, store, notices, args.name, by=_who())
            print(f"resumed {args.name}" if row["changed"]
                  else f"{args.name} was not paused; nothing changed")
    finally:
        await store.close()
    return 0


def _who() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()} (cli)"


def status_text(row: dict[str, Any], now: float) -> str:
    lines = [f"{row['provider']} ({row['mode']} mode): "
             + ("delivering" if row["delivering"] else "HELD")]
    if row["paused"]:
        reason = f": {row['pause_reason']}" if row["pause_reason"] else ""
        lines.append(f"  paused      since {row['paused_at_iso']} by {row['paused_by']}{reason}")
    limited = row["limits"]
    shown = ([f"rate {limited['rate']} (burst {limited['burst']})"] if limited["rate"] else []) \
        + ([f"concurrency {limited['concurrency']}"] if limited["concurrency"] else [])
    lines.append(f"  limits      {', '.join(shown) or 'none'}")
    breaker = row["breaker"]
    if not breaker["enabled"]:
        lines.append("  breaker     off")
    elif breaker["state"] == "closed":
        lines.append(f"  breaker     closed ({breaker['failures']} of {breaker['threshold']} "
                     f"failures in the current {breaker['window_s']:g}s window)")
    else:
        lines.append(f"  breaker     {breaker['state']} since {breaker['opened_at_iso']}, after "
                     f"{breaker['failures']} failures within {breaker['window_s']:g}s; "
                     f"last: {breaker['last_failure']}")
        if breaker["state"] == "open" and breaker["open_until"] is not None:
            left = breaker["open_until"] - now
            lines.append(f"              one probe from {breaker['open_until_iso']}"
                         + (f" (in {left:.0f}s)" if left > 0 else " (due)"))
    return "\n".join(lines)
