"""What a provider is answered, and how the delivery is counted: every status code and
``Retry-After`` the proxy chooses itself, as one table, plus the rules for relaying the app's
own answer and replaying a recorded one. Pure values; the HTTP shell only writes them out.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from sidecar.core.events import Outcome, RecordedResponse
from sidecar.core.headers import (
    ATTEMPT_HEADER,
    FILTERED_HEADER,
    QUEUED_HEADER,
    REPLAY_HEADER,
    UNCLAIMED_HEADER,
)


class Result(enum.StrEnum):
    """How a delivery ended: the ``result`` label of the metric and of the log line."""

    NEW = "new"  # forwarded as attempt 1; the app answered 2xx (or a final status)
    TAKEOVER = "takeover"  # forwarded as attempt > 1 after a failure or a crashed attempt
    DUPLICATE = "duplicate"  # answered from the recorded row; the app was not contacted
    QUEUED = "queued"  # queue mode: stored durably and answered 200; workers deliver it
    FILTERED = "filtered"  # the provider's filter drops it: recorded done, 200, never forwarded
    QUEUE_FULL = "queue_full"  # queue mode: max_queue_depth reached: 503, the provider retries
    HELD = "held"  # forward mode: the provider is paused, or its breaker open: 503, it retries
    RATE_LIMITED = "rate_limited"  # forward mode: over delivery.rate: 429, the provider retries
    IN_FLIGHT = "in_flight"  # another attempt is still running: 409
    MIRRORED_FAILURE = "mirrored_failure"  # the attempt it waited for failed
    UPSTREAM_ERROR = "upstream_error"  # forwarded; the app failed or gave no answer
    # store_outage: forward: the store could not be reached at the claim; forwarded without a
    # claim (no dedupe), the app's answer relayed
    UNCLAIMED = "unclaimed"
    PAYLOAD_MISMATCH = "payload_mismatch"  # same id, other body, policy `reject`
    INVALID_SIGNATURE = "invalid_signature"
    REPLAYED_BODY = "replayed_body"  # a verified body already seen under another event id
    BAD_REQUEST = "bad_request"
    TOO_LARGE = "too_large"
    HANDSHAKE = "handshake"  # answered by the proxy (Slack url_verification, …)
    STORE_ERROR = "store_error"  # the store failed or was too slow: 503
    ERROR = "error"  # a bug in the proxy: 500


class Encoded:
    """Where the HTTP shell keeps an answer that is given again and again (a known duplicate's,
    ``core.known``) as the bytes it writes, once it has serialised them: ``head`` up to the
    ``Date`` header, ``tail`` after it (the ``Date`` changes every second), or ``None`` while
    not serialised, or ``False`` if it cannot be (the shell writes it the general way). What
    the bytes say is the shell's business; the core only keeps them with the answer."""

    __slots__ = ("parts",)

    def __init__(self) -> None:
        self.parts: tuple[bytes, bytes] | Literal[False] | None = None


@dataclass(frozen=True, slots=True)
class Answer:
    """What the provider gets, and what the delivery's log line and metric say about it."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes
    result: Result
    reason: str | None = None  # why a delivery was refused (log field and JSON error body)
    # The rest of the delivery's log line: event id, attempt, latencies, what went wrong.
    log: Mapping[str, object] = field(default_factory=dict)
    # The same answer as bytes, kept from one delivery to the next (see ``Encoded``).
    encoded: Encoded | None = None


@dataclass(frozen=True, slots=True)
class Rule:
    """One answer the proxy gives on its own: status, counted result, message, Retry-After.
    ``message`` may name ``{details}``; ``status`` 0 means "given by the caller"."""

    status: int
    result: Result
    message: str
    retry_after: str | None = None
    close: bool = False  # also close the connection (the client may still be sending)


STORE_RETRY_AFTER: Final = "5"
QUEUE_FULL_RETRY_AFTER: Final = "30"
UPSTREAM_RETRY_AFTER: Final = "1"  # when the app failed without saying when to come back

# Every answer the proxy makes up itself, by reason. Read top to bottom, this is the order in
# which a delivery is checked. A signature or event-id failure's own reason (e.g.
# ``stale_timestamp``, ``missing_event_id``) is reported under the rule of its kind.
RULES: Final[Mapping[str, Rule]] = {
    # refused before anything is stored or forwarded; a refused body is not read any further,
    # so its connection is closed
    "malformed_request": Rule(400, Result.BAD_REQUEST, "malformed HTTP request", close=True),
    "transfer_encoding": Rule(501, Result.BAD_REQUEST, "Transfer-Encoding {coding!r} is not "
                              "accepted: send the body as is or chunked", close=True),
    "too_large": Rule(413, Result.TOO_LARGE, "body exceeds {limit} bytes", close=True),
    "content_encoding": Rule(415, Result.BAD_REQUEST, "Content-Encoding {encoding!r} is not "
                             "accepted", close=True),
    "body_timeout": Rule(408, Result.BAD_REQUEST, "request body not received in time",
                         close=True),
    "invalid_signature": Rule(401, Result.INVALID_SIGNATURE, "signature verification failed"),
    "no_event_id": Rule(400, Result.BAD_REQUEST, "verified delivery carries no usable event id"),
    "replayed_body": Rule(401, Result.REPLAYED_BODY, "this signed body was already delivered "
                          "under another event id (a replay); see on_body_replay"),
    # the store could not decide: the provider keeps the event and retries
    "store_error": Rule(503, Result.STORE_ERROR, "event store unavailable; retry later",
                        retry_after=STORE_RETRY_AFTER),
    # queue mode: the provider's queue holds max_queue_depth events; nothing was stored
    "queue_full": Rule(503, Result.QUEUE_FULL, "the queue for this provider is full; retry "
                       "later", retry_after=QUEUE_FULL_RETRY_AFTER),
    # forward mode, verified but held (``core.breaker``): nothing claimed, the provider retries
    "paused": Rule(503, Result.HELD, "deliveries of this provider are paused; retry later",
                   retry_after="60"),
    "breaker_open": Rule(503, Result.HELD, "the app is failing: deliveries of this provider "
                         "are held until it recovers; retry later", retry_after="{wait}"),
    # forward mode: the provider's delivery.rate is spent for now; nothing was claimed
    "rate_limited": Rule(429, Result.RATE_LIMITED, "deliveries for this provider are limited "
                         "to {rate}; retry later", retry_after="{wait}"),
    # another delivery of the same event decides
    "in_flight": Rule(409, Result.IN_FLIGHT, "this event is being processed; retry later",
                      retry_after="{lease}"),
    "payload_mismatch": Rule(422, Result.PAYLOAD_MISMATCH, "event id already seen with a "
                             "different body"),
    "upstream_failed": Rule(0, Result.MIRRORED_FAILURE, "the attempt for this event failed; "
                            "retry later", retry_after=UPSTREAM_RETRY_AFTER),
    # this delivery's forward got no HTTP answer from the app (status from the outcome)
    "no_answer": Rule(0, Result.UPSTREAM_ERROR, "upstream {outcome}",
                      retry_after=UPSTREAM_RETRY_AFTER),
    # no provider route took the request
    "unknown_path": Rule(404, Result.BAD_REQUEST, "no provider is configured at this path"),
    "method_not_allowed": Rule(405, Result.BAD_REQUEST, "{method} is not accepted here; "
                               "providers POST"),
    # a bug: logged with its traceback and counted
    "internal_error": Rule(500, Result.ERROR, "internal error"),
}

# The status for an attempt that got no HTTP answer: never a 2xx.
NO_ANSWER_STATUS: Final[Mapping[Outcome, int]] = {
    Outcome.TIMEOUT: 504,
    Outcome.CONNECT_ERROR: 502,
    Outcome.DISCONNECTED: 502,
}


def refuse(rule_name: str, reason: str | None = None, *, status: int = 0,
           retry_after: str | None = None, **details: object) -> Answer:
    """The JSON error answer of ``RULES[rule_name]``; ``reason`` defaults to the rule's name."""
    rule = RULES[rule_name]
    headers: list[tuple[str, str]] = [("Content-Type", "application/json; charset=utf-8")]
    wait = retry_after or rule.retry_after
    if wait is not None:
        headers.append(("Retry-After", wait.format(**details)))
    if rule.close:
        headers.append(("Connection", "close"))
    why = reason or rule_name
    body = json.dumps({"error": rule.message.format(**details), "reason": why}).encode()
    return Answer(status or rule.status, tuple(headers), body, rule.result, why)


def failure_status(outcome: Outcome, response: RecordedResponse | None) -> int:
    """The status a provider gets for a failed attempt: the app's non-2xx, else by outcome."""
    if outcome is Outcome.RESPONSE and response is not None and response.status >= 300:
        return response.status
    return NO_ANSWER_STATUS.get(outcome, 502)


def _with(response: RecordedResponse, extra: Iterable[tuple[str, str]]) -> tuple[
        tuple[str, str], ...]:
    """The recorded headers with ``extra`` set (replacing any of the same name)."""
    added = dict(extra)
    names = {name.lower() for name in added}
    kept = tuple((n, v) for n, v in response.headers if n.lower() not in names)
    return kept + tuple(added.items())


def header(response: RecordedResponse | None, name: str) -> str | None:
    if response is None:
        return None
    lowered = name.lower()
    return next((v for n, v in response.headers if n.lower() == lowered), None)


def accepted(event_id: str, *, first: bool) -> Answer:
    """Queue mode: the event is stored (by this delivery, or by an earlier one: ``first``
    False, counted as a duplicate) and the proxy delivers it to the app."""
    body = json.dumps({"accepted": True, "event_id": event_id}).encode()
    headers: tuple[tuple[str, str], ...] = (
        ("Content-Type", "application/json; charset=utf-8"), (QUEUED_HEADER, "true"))
    if not first:
        headers += ((REPLAY_HEADER, "true"),)
    return Answer(200, headers, body, Result.QUEUED if first else Result.DUPLICATE)


def filtered(event_id: str, *, queued: bool = False) -> Answer:
    """The provider's filter dropped the event: recorded done and answered 200, never forwarded
    (``core.filtering``). In queue mode the answer is queue mode's "accepted", marked."""
    if queued:
        answer = accepted(event_id, first=True)
        return Answer(200, (*answer.headers, (FILTERED_HEADER, "true")), answer.body,
                      Result.FILTERED)
    body = json.dumps({"filtered": True, "event_id": event_id}).encode()
    return Answer(200, (("Content-Type", "application/json; charset=utf-8"),
                        (FILTERED_HEADER, "true")), body, Result.FILTERED)


def unclaimed(response: RecordedResponse) -> Answer:
    """The app's answer to a forward made without a claim (the store could not be reached and
    the provider's ``store_outage`` is ``forward``): relayed, marked; a failure keeps the app's
    ``Retry-After`` or gets a short one."""
    extra = [(UNCLAIMED_HEADER, "true")]
    if response.status >= 300:
        extra.append(("Retry-After", header(response, "Retry-After") or UPSTREAM_RETRY_AFTER))
    return Answer(response.status, _with(response, extra), response.body, Result.UNCLAIMED)


def replayed(response: RecordedResponse | None, attempt: int) -> Answer:
    """A redelivery of a done event: the recorded answer (a 2xx stays 2xx), marked as a
    replay. A row done without a recorded response (written by an older release) gets 200."""
    extra = ((REPLAY_HEADER, "true"), (ATTEMPT_HEADER, str(attempt)))
    if response is None:
        return Answer(200, extra, b"", Result.DUPLICATE)
    return Answer(response.status, _with(response, extra), response.body, Result.DUPLICATE)


def relayed(response: RecordedResponse, attempt: int, result: Result) -> Answer:
    """The app's own answer to this delivery's forward. A failure keeps the app's
    ``Retry-After`` or gets a short one, so the provider comes back soon."""
    extra = [(ATTEMPT_HEADER, str(attempt))]
    if result is Result.UPSTREAM_ERROR:
        extra.append(("Retry-After", header(response, "Retry-After") or UPSTREAM_RETRY_AFTER))
    return Answer(response.status, _with(response, extra), response.body, result)


def no_answer(outcome: Outcome) -> Answer:
    """This delivery's forward got no HTTP answer (timeout, refused, connection lost)."""
    return refuse("no_answer", outcome.value, status=NO_ANSWER_STATUS[outcome],
                  outcome=outcome.value.replace("_", " "))


def mirrored(outcome: Outcome | None, response: RecordedResponse | None) -> Answer:
    """The attempt this delivery waited for failed: its failure, never a 2xx."""
    return refuse("upstream_failed",
                  status=failure_status(outcome or Outcome.DISCONNECTED, response))
