"""One destination of a queue-mode provider (``providers.<key>.destinations[]``): an app that gets
each accepted event its filter admits, through a queue of its own (see "Fan-out" in
docs/design.md)."""

from __future__ import annotations

from typing import Final

from sidecar.config.declarations import block, inheriting, nested, setting
from sidecar.config.kinds import Custom, String, text
from sidecar.config.model.delivery import FILTER_SCHEMA, DeliveryConfig
from sidecar.config.model.upstream import UpstreamConfig
from sidecar.core.filtering import FilterSpec

DESTINATION_NAME_PATTERN: Final = "^[a-z0-9_-]{1,63}$"
_NAME_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")
ROUTE_SEPARATOR: Final = "."  # never in a provider key: ``stripe.billing`` is a destination's


@block("One destination: an app that gets every accepted event its filter admits, with its own "
       "queue entry, retries, dead letters, limits and breaker.")
class DestinationConfig:
    name: str = setting(String("name", text({"type": "string",
                                             "pattern": DESTINATION_NAME_PATTERN}),
                               "must be lower-case letters, digits, '-' and '_' (at most 63)",
                               lambda name: _NAME_CHARS.issuperset(name) and 0 < len(name) < 64),
                        "The destination's name, unique in the provider: its queue is "
                        "<provider>.<name> in the store, metrics and the events CLI.",
                        required=True)
    upstream: UpstreamConfig = inheriting(
        UpstreamConfig, "upstream", "The app (url, timeout, signing_secrets, …): the top-level "
        "upstream with each key given here replacing its own.")
    delivery: DeliveryConfig = nested(DeliveryConfig)
    filter: FilterSpec | None = setting(
        Custom("mapping", FILTER_SCHEMA),
        "The events this destination does not want (as the provider's filter): decided when "
        "the event is accepted; the others still get it.", nullable=True)


def route_key(provider: str, destination: str) -> str:
    """The key of a destination's queue in the store (``stripe.billing``)."""
    return f"{provider}{ROUTE_SEPARATOR}{destination}"
