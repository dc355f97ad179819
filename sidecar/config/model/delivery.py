"""A route's delivery limits and circuit breaker (``delivery:`` of a provider or of one of its
destinations), and the filter's schema they share."""

from __future__ import annotations

from typing import Final

from sidecar.config.declarations import block, nested, setting
from sidecar.config.kinds import Duration, Integer, RateKind
from sidecar.core.rates import Rate


@block("A circuit breaker: after `failures` failed attempts within `window` the provider's "
       "deliveries pause themselves; after `cooldown` one probe decides whether they resume. "
       "Off while failures is empty.", nullable=True)
class BreakerConfig:
    failures: int | None = setting(Integer(1), "Failed attempts (the app unreachable, timed "
                                   "out, or answering 5xx or 429) within the window that open "
                                   "the breaker. Empty: no breaker.", nullable=True)
    window: float = setting(Duration(positive=True), "How far back failed attempts count.",
                            yaml_default="1m")
    cooldown: float = setting(Duration(positive=True), "How long the breaker stays open "
                              "before one probe is let through.", yaml_default="30s")


@block("How fast and how many at once this provider's events may reach the app, across every "
       "process and replica sharing the store.", nullable=True)
class DeliveryConfig:
    rate: Rate | None = setting(RateKind(), "Events forwarded to the app at most, e.g. 20/s or "
                                "600/m. Queue mode: workers wait for their turn; forward "
                                "mode: a delivery over it gets 429 with Retry-After. Empty: "
                                "no limit.", nullable=True)
    burst: int | None = setting(Integer(1), "Events that may go at once above the rate after "
                                "a quiet spell (a token bucket's size). Empty: one second's "
                                "worth of the rate, at least 1.", nullable=True)
    concurrency: int | None = setting(Integer(1), "Queue mode: forwards in flight at once "
                                      "across every process (queue.concurrency bounds each "
                                      "process). Empty: no limit.", nullable=True)
    breaker: BreakerConfig = nested(BreakerConfig)


_GLOBS: Final = {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}}
_SCALAR: Final = {"type": ["string", "number", "boolean", "null"]}
FILTER_SCHEMA: Final = {
    "type": "object", "additionalProperties": False, "minProperties": 1,
    "properties": {
        "types": {"type": "object", "additionalProperties": False, "minProperties": 1,
                  "properties": {"allow": _GLOBS, "drop": _GLOBS}},
        "when": {"type": "array", "minItems": 1, "items": {
            "type": "object", "additionalProperties": False, "required": ["path"],
            "minProperties": 2, "maxProperties": 2,
            "properties": {"path": {"type": "string", "pattern": "^\\$"},
                           "equals": _SCALAR,
                           "in": {"type": "array", "minItems": 1, "items": _SCALAR},
                           "exists": {"type": "boolean"}}}},
    },
}
