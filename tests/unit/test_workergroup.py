"""What worker 0's /healthz makes of its supervisor's word on the group: a truth table on the
supervisor's messages and the clock."""

from __future__ import annotations

import pytest

from sidecar.core.workergroup import GroupHealth, beat_interval, group_message

TIMEOUT = 5.0


def test_a_group_heard_from_with_no_seat_down_is_healthy() -> None:
    group = GroupHealth(TIMEOUT, heard_at=0.0)
    group.heard(group_message([], 0), now=4.0)
    assert group.problem(now=8.9) is None


def test_a_seat_down_is_unhealthy_until_the_supervisor_says_otherwise() -> None:
    group = GroupHealth(TIMEOUT, heard_at=0.0)
    group.heard(group_message([1, 0], 2), now=1.0)
    assert group.problem(now=1.5) == {"reason": "workers_down", "workers_down": [0, 1]}
    assert group.replaced == 2
    group.heard(group_message([], 2), now=2.0)
    assert group.problem(now=2.5) is None and group.replaced == 2


def test_a_silent_supervisor_is_unhealthy_past_the_timeout() -> None:
    group = GroupHealth(TIMEOUT, heard_at=0.0)
    group.heard(group_message([], 0), now=1.0)
    assert group.problem(now=1.0 + TIMEOUT) is None
    assert group.problem(now=1.0 + TIMEOUT + 0.5) == {"reason": "supervisor_silent",
                                                      "silent_s": TIMEOUT + 0.5}


@pytest.mark.parametrize("line", [b"beat\n", b"{}\n", b'{"down": "x", "replaced": 1}\n',
                                  b'{"down": [1]}\n', b"\xff\n"])
def test_anything_else_is_not_the_supervisor_heard(line: bytes) -> None:
    group = GroupHealth(TIMEOUT, heard_at=0.0)
    group.heard(line, now=4.0)
    assert (group.heard_at, group.down, group.replaced) == (0.0, (), 0)


def test_a_worker_beats_five_times_a_timeout() -> None:
    assert beat_interval(5.0) == 1.0
