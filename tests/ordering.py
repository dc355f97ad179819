"""Longest test files first, from the seconds each file took, recorded in ``tests/durations.json``.

With ``-n 2 --dist loadfile`` every file runs whole in one worker, handed out in the order the
files were collected: a long file handed out last finishes long after the other worker is idle.
So the files are collected longest first (the tests inside a file keep their order), and
xdist's own reordering (by number of tests, not by time) is turned off. Files missing from the
record come after the recorded ones, in collection order: record the long ones (a new long file
left out of the record runs late). Without the record the order is the default one.

Re-record after adding or reshaping slow tests (any run, xdist or not, sums each file's setup,
call and teardown seconds)::

    .venv/bin/python -m pytest -q -p no:cacheprovider -n 2 --dist loadfile \
        --record-durations tests/durations.json
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

RECORD = Path(__file__).resolve().parent / "durations.json"
_seconds: defaultdict[str, float] = defaultdict(float)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--record-durations", metavar="PATH", default=None,
                     help="write each test file's seconds (setup + call + teardown) to PATH")


def pytest_configure(config: pytest.Config) -> None:
    if RECORD.exists() and hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False  # keep the order made below


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if not RECORD.exists():
        return
    recorded: dict[str, float] = json.loads(RECORD.read_text())
    first: dict[str, int] = {}
    for index, item in enumerate(items):
        first.setdefault(_file(item.nodeid), index)

    def key(item: pytest.Item) -> tuple[float, int]:
        name = _file(item.nodeid)
        return (-recorded.get(name, 0.0), first[name])

    items.sort(key=key)  # stable: a file's tests keep their order


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _seconds[_file(report.nodeid)] += report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = session.config.getoption("--record-durations")
    # Under xdist the workers' reports reach the controller too: only it writes the file.
    if path is None or hasattr(session.config, "workerinput") or not _seconds:
        return
    ordered = dict(sorted(((name, round(s, 1)) for name, s in _seconds.items()),
                          key=lambda pair: -pair[1]))
    Path(path).write_text(json.dumps(ordered, indent=1) + "\n")
