"""The log pipeline: library lines (aiohttp, asyncpg, asyncio) go through structlog like ours, and
an exception they carry is named, never rendered — its message may quote request bytes."""

from __future__ import annotations

import io
import json
import logging

from sidecar.obs.logs import get_logger
from sidecar.obs.storelog import StoreLog

SIGNATURE = "t=1700000000,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd"




def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_library_exception_is_named_not_rendered(output: io.StringIO) -> None:
    for name in ("aiohttp.server", "aiohttp.client", "asyncpg.pool", "asyncio"):
        try:
            raise ValueError(f"Got more than 8190 bytes when reading: b'Stripe-Signature: "
                             f"{SIGNATURE}'")
        except ValueError:
            logging.getLogger(name).exception("Error handling request from %s", "127.0.0.1")
    text = output.getvalue()
    assert SIGNATURE not in text and "Traceback" not in text and "8190" not in text
    entries = lines(output)
    assert [e["logger"] for e in entries] == ["aiohttp.server", "aiohttp.client", "asyncpg.pool",
                                              "asyncio"]
    assert all(e["error_type"] == "ValueError" and e["level"] == "error" for e in entries)
    assert entries[0]["event"] == "Error handling request from 127.0.0.1"


def test_a_library_extra_is_not_copied(output: io.StringIO) -> None:
    logging.getLogger("aiohttp.web").warning("request", extra={"first_request_line": SIGNATURE})
    assert SIGNATURE not in output.getvalue()
    assert lines(output)[0]["event"] == "request"


def test_our_own_bug_keeps_its_traceback(output: io.StringIO) -> None:
    try:
        raise RuntimeError("a bug in the proxy")
    except RuntimeError as exc:
        get_logger("sidecar.test").error("delivery", exc_info=exc)
    entry = lines(output)[0]
    assert "Traceback" in str(entry["exception"]) and "a bug in the proxy" in str(
        entry["exception"])


def test_what_a_store_reports_keeps_its_line_names_and_fields(output: io.StringIO) -> None:
    log = StoreLog()
    try:
        raise ConnectionRefusedError("connection refused")
    except ConnectionRefusedError as exc:
        log.unavailable("get: connection lost: ConnectionRefusedError", exc)
    log.unavailable("get: no answer within the store deadline (5.0s)", None)
    log.recovered(1.23456, 7)
    log.listen_lost("connection closed", 0.1)
    log.listen_restored(0.5004)
    log.wake_failed("stripe", "RuntimeError: boom")
    down, deadline, up, lost, restored, wake = (
        {k: v for k, v in entry.items() if k != "timestamp"} for entry in lines(output))
    assert "ConnectionRefusedError" in str(down.pop("exception"))
    assert down == {"event": "store_unavailable", "level": "error",
                    "error": "get: connection lost: ConnectionRefusedError"}
    assert "exception" not in deadline
    assert (up["event"], up["level"], up["outage_s"], up["failed_calls"]) == (
        "store_recovered", "info", 1.235, 7)
    assert (lost["event"], lost["level"], lost["error"], lost["retry_in_s"]) == (
        "queue_listen_lost", "warning", "connection closed", 0.1)
    assert (restored["event"], restored["level"], restored["outage_s"]) == (
        "queue_listen_restored", "info", 0.5)
    assert (wake["event"], wake["level"], wake["provider"], wake["error"]) == (
        "queue_wake_failed", "error", "stripe", "RuntimeError: boom")
