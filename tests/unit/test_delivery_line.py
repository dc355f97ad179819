"""The ``delivery`` line written by its precompiled function has the bytes structlog's chain
writes for the same call, and the chain is used whenever the precompiled one does not apply."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator

import pytest
import structlog

from sidecar.obs.logs import configure_logging, delivery_line, get_logger
from tests.conftest import logging_into

TIMESTAMP = re.compile(r'"timestamp": "\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z"')

DELIVERIES: list[tuple[str, str, int | None, float, dict[str, object]]] = [
    ("stripe", "new", 200, 3.21, {"event_id": "evt_1", "attempt": 1, "claim_ms": 0.87,
                                  "upstream": "http://127.0.0.1:8000",
                                  "app_status_class": "2xx", "upstream_ms": 1.5}),
    ("github", "duplicate", 200, 0.12, {"event_id": "d6a5-…", "attempt": 2, "known": True}),
    ("stripe", "invalid_signature", 401, 0.0, {"event_id": None, "attempt": None,
                                               "reason": "no_valid_signature"}),
    # Odd strings: quotes, backslashes, control characters, non-ASCII, a lone surrogate.
    ("weird\"key", "upstream_error", 502, 1e-7, {
        "event_id": 'evt_"quoted"\\back\nline\ttab\x00\x1f', "attempt": 3,
        "upstream_error": "ünïcödé ✓ 🚀 \u2028 \ud800", "superseded": False,
        "batch_size": 10**20, "big": 1e300, "negative": -0.0}),
    ("stripe", "too_large", 413, 12345.67, {}),
    ("s", "new", None, float("inf"), {"nan": float("nan"), "minf": float("-inf")}),
]


@pytest.fixture
def info_output() -> Iterator[io.StringIO]:
    with logging_into("info") as stream:
        yield stream


def _both(stream: io.StringIO, delivery: tuple[str, str, int | None, float, dict[str, object]]
          ) -> tuple[str, str]:
    """The line from the precompiled function, and the chain's for the same call."""
    provider, result, status, latency_ms, fields = delivery
    start = stream.tell()
    assert delivery_line(provider, result, status, latency_ms, fields)
    get_logger("sidecar.delivery").info("delivery", provider=provider, result=result,
                                        status=status, latency_ms=latency_ms, **fields)
    fast, chain = stream.getvalue()[start:].splitlines(keepends=True)
    return fast, chain


@pytest.mark.parametrize("delivery", DELIVERIES, ids=[d[1] for d in DELIVERIES])
def test_the_precompiled_line_has_the_chains_bytes(info_output: io.StringIO,
                                                    delivery: tuple) -> None:
    fast, chain = _both(info_output, delivery)
    assert TIMESTAMP.search(fast) and TIMESTAMP.search(chain)
    assert TIMESTAMP.sub("", fast) == TIMESTAMP.sub("", chain)
    assert fast.endswith("}\n")


def test_context_variables_are_placed_as_the_chain_places_them(
        info_output: io.StringIO) -> None:
    # A worker's seat is bound for every line (workers > 1); a key the line has keeps its own.
    with structlog.contextvars.bound_contextvars(worker=2, event_id="from the context"):
        fast, chain = _both(info_output, DELIVERIES[0])
    assert TIMESTAMP.sub("", fast) == TIMESTAMP.sub("", chain)
    line = json.loads(fast)
    assert line["worker"] == 2 and line["event_id"] == "evt_1"


def test_the_chain_writes_it_when_the_precompiled_line_does_not_apply(
        info_output: io.StringIO) -> None:
    provider, result, status, latency_ms, fields = DELIVERIES[0]
    # A value json.dumps would hand to the renderer's ``default``; a key the chain places.
    assert not delivery_line(provider, result, status, latency_ms, {"odd": object()})
    assert not delivery_line(provider, result, status, latency_ms, {"level": "x"})
    with structlog.contextvars.bound_contextvars(timestamp="t"):
        assert not delivery_line(provider, result, status, latency_ms, fields)
    with structlog.testing.capture_logs() as captured:  # tests capturing see every line
        assert not delivery_line(provider, result, status, latency_ms, fields)
    assert captured == []
    assert info_output.getvalue() == ""
    # The chain is ours again once the capture ends.
    assert delivery_line(provider, result, status, latency_ms, fields)


@pytest.mark.parametrize(("level", "fmt"), [("warning", "json"), ("info", "console")])
def test_only_json_at_info_or_below(level: str, fmt: str) -> None:
    root = logging.getLogger()
    handlers, old_level = root.handlers[:], root.level
    try:
        configure_logging(level, fmt, io.StringIO())
        assert not delivery_line("stripe", "new", 200, 1.0, {})
    finally:
        root.handlers[:] = handlers
        root.setLevel(old_level)
        logging.getLogger("aiohttp.access").setLevel(logging.NOTSET)
        structlog.reset_defaults()
