"""The ``workers`` key: an integer ≥ 1 or ``auto`` (the CPUs the process may run on), and the
worker seat the supervisor hands to each worker."""

from __future__ import annotations

import os
from typing import Any

import pytest

from sidecar.config.kinds import ProcessCount, available_cpus
from sidecar.config.loader import parse_config
from sidecar.core.errors import ConfigError
from sidecar.runtime.serve import WorkerSeat

MESSAGE = "must be an integer ≥ 1, or auto (one per CPU available)"


def config(**top: Any) -> dict[str, Any]:
    return {
        "upstream": {"url": "http://127.0.0.1:3000"},
        "providers": {"stripe": {"path": "/webhooks/stripe", "preset": "stripe",
                                 "secrets": ["whsec_abc"]}},
        **top,
    }


def test_one_worker_by_default() -> None:
    assert parse_config(config(), env={}).workers == 1


@pytest.mark.parametrize("value", [1, 2, 16])
def test_a_positive_integer_is_taken_as_is(value: int) -> None:
    assert parse_config(config(workers=value), env={}).workers == value


def test_auto_is_the_cpus_this_process_may_run_on(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_config(config(workers="auto"), env={}).workers == len(os.sched_getaffinity(0))
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 2, 5})
    assert available_cpus() == 3
    assert parse_config(config(workers="auto"), env={}).workers == 3


def test_auto_is_never_less_than_one() -> None:
    assert ProcessCount(count_auto=lambda: 0).parse("auto", "workers") == 1


def test_auto_may_come_from_the_environment() -> None:
    parsed = parse_config(config(workers="${WORKERS:-auto}"), env={})
    assert parsed.workers == available_cpus()


@pytest.mark.parametrize("value", [0, -1, True, False, 1.5, "2", "many", "AUTO", None, [2]])
def test_anything_else_is_refused_naming_the_key(value: object) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(config(workers=value), env={})
    assert info.value.path == "workers"
    assert MESSAGE in str(info.value)


def test_the_seat_travels_as_json() -> None:
    seat = WorkerSeat(index=1, count=2, listen_fds=[5], admin_fds=None, channel_fd=6,
                      metrics_dir="/tmp/m", config_fd=7, config_path="config.yaml",
                      config_folder="/etc/webhook-sidecar", supervisor=1)
    assert WorkerSeat.from_json(seat.to_json()) == seat
