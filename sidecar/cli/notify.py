"""``webhook-sidecar notify test``: one test message to every ``notify:`` target, each result on
a line of its own; exit 1 if any target did not take it."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from sidecar.config.model import Config
from sidecar.core.errors import ConfigError
from sidecar.ops.notify import Delivered
from sidecar.runtime import loop as event_loop


def configure_parser(parser: argparse.ArgumentParser,
                     with_config: Callable[[argparse.ArgumentParser], None]) -> None:
    sub = parser.add_subparsers(dest="notify_command", required=True)
    test = sub.add_parser("test", help="send a test message to every notify target and report "
                          "each result (exit 1 if any failed)")
    with_config(test)
    test.add_argument("--provider", help="the provider the message names (default: the "
                      "first configured)")


def run(config: Config, args: argparse.Namespace) -> int:
    if not config.notify.targets:
        raise ConfigError("notify.targets", "no notification targets are configured")
    provider = args.provider or config.providers[0].key
    if config.provider(provider) is None:
        raise ConfigError("", f"unknown provider {provider!r} (configured: "
                          + ", ".join(p.key for p in config.providers) + ")")
    results = event_loop.run(_send(config, provider))
    for result in results:
        print(_line(result))
    return 0 if all(result.sent for result in results) else 1


async def _send(config: Config, provider: str) -> list[Delivered]:
    from sidecar.runtime.wiring import build_notifier

    notifier = build_notifier(config, None)
    assert notifier is not None
    notifier.start()
    try:
        return await notifier.send_test(provider)
    finally:
        await notifier.close(0.0)


def _line(result: Delivered) -> str:
    tries = f"{result.tries} {'try' if result.tries == 1 else 'tries'}"
    if result.sent:
        return f"sent    {result.target}: {result.status} after {tries} ({result.message_id})"
    return f"failed  {result.target}: {result.error} after {tries} ({result.message_id})"
