"""The pure parts of notifications: what a try's answer means, the waits between tries, the
message bodies, and the two conditions the proxy notices itself, as truth tables."""

from __future__ import annotations

import json

import pytest

from sidecar.core.notices import Notice, NoticeKind
from sidecar.core.notifying import (
    FIRST_RETRY,
    MAX_RETRY,
    DeadLetters,
    Message,
    SignatureFailures,
    TryResult,
    retry_delay,
    rfc3339,
    target_id,
    try_result,
)


@pytest.mark.parametrize(("status", "result"), [
    (None, TryResult.AGAIN),  # refused, reset, timed out
    (200, TryResult.SENT),
    (204, TryResult.SENT),
    (299, TryResult.SENT),
    (301, TryResult.REFUSED),
    (400, TryResult.REFUSED),
    (401, TryResult.REFUSED),
    (404, TryResult.REFUSED),
    (429, TryResult.AGAIN),
    (500, TryResult.AGAIN),
    (503, TryResult.AGAIN),
])
def test_what_an_answer_means(status: int | None, result: TryResult) -> None:
    assert try_result(status) is result


@pytest.mark.parametrize(("tries", "retry_after", "delay"), [
    (1, None, FIRST_RETRY),
    (2, None, 2 * FIRST_RETRY),
    (3, None, 4 * FIRST_RETRY),
    (20, None, MAX_RETRY),
    (1, 3.0, 3.0),  # the answer's Retry-After
    (1, 0.0, 0.0),
    (1, 3600.0, MAX_RETRY),  # bounded
    (2, -1.0, 2 * FIRST_RETRY),  # nonsense is ignored
])
def test_waits_between_tries(tries: int, retry_after: float | None, delay: float) -> None:
    assert retry_delay(tries, retry_after) == delay


def test_standard_body() -> None:
    message = Message.of(Notice(NoticeKind.BREAKER_OPENED, "stripe", {"failures": 10}),
                         at=1_764_768_420.5)
    assert json.loads(message.standard_body()) == {
        "type": "breaker.opened", "timestamp": "2025-12-03T13:27:00.500Z",
        "data": {"provider": "stripe", "failures": 10}}


def test_slack_body_is_text_naming_the_condition() -> None:
    message = Message.of(Notice(NoticeKind.DEAD_LETTERS, "stripe",
                                {"dead": 12, "threshold": 10}), at=0.0)
    body = json.loads(message.slack_body())
    assert list(body) == ["text"]
    assert "provider stripe has 12 dead events (threshold 10)" in body["text"]


@pytest.mark.parametrize("kind", list(NoticeKind))
def test_every_kind_has_a_summary_naming_its_provider(kind: NoticeKind) -> None:
    summary = Message.of(Notice(kind, "acme"), at=0.0).summary()
    assert "acme" in summary and "test" not in summary


def test_rfc3339_is_utc_with_milliseconds() -> None:
    assert rfc3339(0.0) == "1970-01-01T00:00:00.000Z"


def test_target_ids_hide_the_url_and_tell_formats_apart() -> None:
    url = "https://hooks.slack.com/services/T000/B000/SECRET"
    assert "SECRET" not in target_id(url, "slack")
    assert target_id(url, "slack") != target_id(url, "standard")
    assert target_id(url, "slack") == target_id(url, "slack")


# Dead letters: (dead counts read, notices expected) in turn, threshold 5.
DEAD_LETTER_ROUNDS = [
    ({"a": 0}, []),
    ({"a": 4}, []),
    ({"a": 5}, ["a"]),  # reached
    ({"a": 9}, []),  # still above: no second notice
    ({"a": 2}, []),  # below: armed again
    ({"a": 7, "b": 6}, ["a", "b"]),
    ({"b": 6}, []),  # a has no dead entries left (left out of the stats): armed again
    ({"a": 5, "b": 6}, ["a"]),
]


def test_dead_letters_notice_each_crossing_once() -> None:
    watch = DeadLetters(5)
    for dead, expected in DEAD_LETTER_ROUNDS:
        notices = watch.observe(dead)
        assert [n.provider for n in notices] == expected, dead
        for notice in notices:
            assert notice.kind is NoticeKind.DEAD_LETTERS
            assert notice.detail == {"dead": dead[notice.provider], "threshold": 5}


def test_dead_letters_first_reading_above_counts() -> None:
    assert [n.provider for n in DeadLetters(1).observe({"a": 3})] == ["a"]


# Signature failures, 3 within 10 s: (time of a failure, notice expected) in turn.
SIGNATURE_ROUNDS = [
    (0.0, False),
    (1.0, False),
    (2.0, True),  # 3 within 10 s
    (3.0, False),  # still failing: no second notice
    (9.0, False),
    (30.0, False),  # the window had emptied: armed again, 1 in the window
    (31.0, False),
    (32.0, True),
    (50.0, False),
    (61.0, False),  # 50, 61: two within 10 s
    (75.0, False),  # 61, 75: two
    (76.0, False),
    (77.0, True),  # 75, 76, 77
]


def test_signature_failures_notice_when_they_start() -> None:
    watch = SignatureFailures(3, 10.0)
    for now, expected in SIGNATURE_ROUNDS:
        notice = watch.failed("stripe", now)
        assert (notice is not None) is expected, now
        if notice is not None:
            assert notice == Notice(NoticeKind.SIGNATURE_FAILURES, "stripe",
                                    {"failures": 3, "window": "10s"})


def test_signature_failures_are_counted_per_provider() -> None:
    watch = SignatureFailures(2, 10.0)
    assert watch.failed("a", 0.0) is None
    assert watch.failed("b", 1.0) is None
    assert watch.failed("a", 2.0) is not None
    assert watch.failed("b", 20.0) is None
