"""Forward mode and a held provider: how a delivery's answer tells the breaker how its attempt
ended (a truth table), and how ``providers status`` words a provider's state."""

from __future__ import annotations

import pytest

from sidecar.cli.providers import status_text
from sidecar.config.loader import parse_config
from sidecar.core.answers import Answer, Result, no_answer, refuse, relayed
from sidecar.core.breaker import Held, HoldReason, ProbeEnd, ProviderState
from sidecar.core.events import Outcome, RecordedResponse
from sidecar.delivery.held import attempt_end, held_refusal
from sidecar.ops.providers import describe
from tests.support import base_config

NOW = 1_700_000_000.0


def app(status: int, result: Result) -> Answer:
    return relayed(RecordedResponse(status, (), b""), 1, result)


@pytest.mark.parametrize(("answer", "end", "why"), [
    (app(200, Result.NEW), ProbeEnd.SUCCEEDED, ""),
    (app(200, Result.TAKEOVER), ProbeEnd.SUCCEEDED, ""),
    (app(404, Result.UPSTREAM_ERROR), ProbeEnd.SUCCEEDED, ""),  # the app is up, and chose it
    (app(500, Result.UPSTREAM_ERROR), ProbeEnd.FAILED, "HTTP 500"),
    (app(503, Result.UPSTREAM_ERROR), ProbeEnd.FAILED, "HTTP 503"),
    (app(429, Result.UPSTREAM_ERROR), ProbeEnd.FAILED, "HTTP 429"),
    (no_answer(Outcome.TIMEOUT), ProbeEnd.FAILED, "timeout"),
    (no_answer(Outcome.CONNECT_ERROR), ProbeEnd.FAILED, "connect error"),
    (app(200, Result.DUPLICATE), ProbeEnd.UNUSED, ""),  # no attempt made
    (refuse("in_flight", lease=1), ProbeEnd.UNUSED, ""),
    (refuse("store_error"), ProbeEnd.UNUSED, ""),
])
def test_attempt_end(answer: Answer, end: ProbeEnd, why: str) -> None:
    assert attempt_end(answer) == (end, why)


def test_the_held_refusals() -> None:
    paused = held_refusal(Held(HoldReason.PAUSED, 60.0))
    assert (paused.status, paused.reason, paused.result) == (503, "paused", Result.HELD)
    assert ("Retry-After", "60") in paused.headers
    cooling = held_refusal(Held(HoldReason.BREAKER_OPEN, 12.2))
    assert (cooling.status, cooling.reason) == (503, "breaker_open")
    assert ("Retry-After", "13") in cooling.headers


def row(**breaker: object) -> dict[str, object]:
    return {"provider": "stripe", "mode": "queue", "delivering": not breaker, "paused": False,
            "limits": {"rate": None, "burst": None, "concurrency": None},
            "breaker": {"enabled": True, "state": "closed", "failures": 2, "threshold": 10,
                        "window_s": 60.0, **breaker}}


def teststatus_text_says_when_and_why_a_breaker_opened_and_when_it_probes() -> None:
    assert status_text(row(), NOW).splitlines() == [
        "stripe (queue mode): delivering",
        "  limits      none",
        "  breaker     closed (2 of 10 failures in the current 60s window)"]
    opened = row(state="open", failures=10, opened_at_iso="2023-11-14T22:13:00.000Z",
                 last_failure="HTTP 500", open_until=NOW + 20,
                 open_until_iso="2023-11-14T22:13:40.000Z")
    assert status_text(opened, NOW).splitlines() == [
        "stripe (queue mode): HELD",
        "  limits      none",
        "  breaker     open since 2023-11-14T22:13:00.000Z, after 10 failures within 60s; "
        "last: HTTP 500",
        "              one probe from 2023-11-14T22:13:40.000Z (in 20s)"]


@pytest.mark.parametrize(("delivery", "limits", "line"), [
    ({}, {"rate": None, "burst": None, "concurrency": None}, "none"),
    ({"rate": "600/m"}, {"rate": "600/m", "burst": 10, "concurrency": None},
     "rate 600/m (burst 10)"),
    ({"rate": "20/s", "burst": 40, "concurrency": 4},
     {"rate": "20/s", "burst": 40, "concurrency": 4}, "rate 20/s (burst 40), concurrency 4"),
])
def test_the_status_shows_the_delivery_limits(delivery: dict[str, object],
                                              limits: dict[str, object], line: str) -> None:
    data = base_config("http://127.0.0.1:9", "sqlite:///unused.db")
    data["providers"]["stripe"].update(mode="queue", delivery=delivery)
    provider = parse_config(data, env={}).providers[0]
    shown = describe(provider, ProviderState(provider.key))
    assert shown["limits"] == limits
    assert f"  limits      {line}" in status_text(shown, NOW).splitlines()
