"""What worker 0's /healthz makes of its supervisor's word on the group: a truth table on the
supervisor's messages and the clock; and the group's own clock: start deadline, retry pace."""

from __future__ import annotations

import pytest

from sidecar.core.workergroup import (
    GroupHealth,
    beat_interval,
    group_message,
    retry_delay,
    start_deadline,
)

TIMEOUT = 5.0


def test_a_group_heard_from_with_no_seat_down_is_healthy() -> None:
    group = GroupHealth(TIMEOUT, heard_at=0.0)
    group.heard(group_message([], [], 0), now=4.0)
    assert group.problem(now=8.9) is None


def test_a_seat_down_is_unhealthy_until_the_supervisor_says_otherwise() -> None:
    group = GroupHealth(TIMEOUT, heard_at=0.0)
    group.heard(group_message([1, 0], [], 2), now=1.0)
    assert group.problem(now=1.5) == {"reason": "workers_down", "workers_down": [0, 1]}
    assert group.replaced == 2
    group.heard(group_message([], [], 2), now=2.0)
    assert group.problem(now=2.5) is None and group.replaced == 2


def test_a_silent_supervisor_is_unhealthy_past_the_timeout() -> None:
    group = GroupHealth(TIMEOUT, heard_at=0.0)
    group.heard(group_message([], [], 0), now=1.0)
    assert group.problem(now=1.0 + TIMEOUT) is None
    assert group.problem(now=1.0 + TIMEOUT + 0.5) == {"reason": "supervisor_silent",
                                                      "silent_s": TIMEOUT + 0.5}


@pytest.mark.parametrize("line", [b"beat\n", b"{}\n",
                                  b'{"down": "x", "vacant": [], "replaced": 1}\n',
                                  b'{"down": [1], "vacant": []}\n',
                                  b'{"down": [1], "replaced": 1}\n', b"\xff\n"])
def test_anything_else_is_not_the_supervisor_heard(line: bytes) -> None:
    group = GroupHealth(TIMEOUT, heard_at=0.0)
    group.heard(line, now=4.0)
    assert (group.heard_at, group.down, group.replaced) == (0.0, (), 0)


def test_a_worker_beats_five_times_a_timeout() -> None:
    assert beat_interval(5.0) == 1.0


def test_a_vacant_seat_is_reported_but_is_no_problem() -> None:
    """A seat whose worker is starting, or could not start and is tried again, takes no
    connections (its socket does not listen): /healthz stays 200 and names it."""
    group = GroupHealth(TIMEOUT, heard_at=0.0)
    group.heard(group_message([], [1], 0), now=1.0)
    assert group.problem(now=1.5) is None
    assert group.details() == {"workers_vacant": [1]}
    group.heard(group_message([0], [1], 1), now=2.0)
    assert group.problem(now=2.5) == {"reason": "workers_down", "workers_down": [0]}
    group.heard(group_message([], [], 1), now=3.0)
    assert group.details() == {}


def test_a_worker_has_ten_timeouts_to_start() -> None:
    assert start_deadline(5.0) == 50.0
    assert start_deadline(0.5) == 5.0


@pytest.mark.parametrize(("timeout", "delays"), [
    (5.0, [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]),
    (1.0, [1.0, 2.0, 2.0, 2.0]),
    (0.2, [1.0, 1.0]),
])
def test_a_vacant_seat_is_tried_again_at_a_doubling_pace_up_to_twice_the_timeout(
    timeout: float, delays: list[float],
) -> None:
    assert [retry_delay(failures, timeout) for failures in range(1, len(delays) + 1)] == delays
    assert retry_delay(10_000, timeout) == delays[-1]  # however long the outage
