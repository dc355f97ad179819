"""row_retention (sidecar.ops.maintenance): how old a provider's rows must be before row-level
retention deletes them, unpartitioned and partitioned (docs/design.md, "Row-level retention on
a partitioned store")."""

from __future__ import annotations

import pytest

from sidecar.ops.maintenance import row_retention

DAY = 86400.0


@pytest.mark.parametrize(("retention", "longest", "interval", "expected"), [
    (3 * DAY, 7 * DAY, None, 3 * DAY),          # unpartitioned: its own retention
    (7 * DAY, 7 * DAY, DAY, 9 * DAY),           # the longest: left to the drop (backstop)
    (6.5 * DAY, 7 * DAY, DAY, 9 * DAY),         # within one interval of it: the same
    (6 * DAY, 7 * DAY, DAY, 9 * DAY),           # exactly one interval shorter: the same
    (5 * DAY, 7 * DAY, DAY, 5 * DAY),           # more than one shorter: row deletes
    (DAY, 30 * DAY, DAY, DAY),
    (3600.0, 7200.0, 86400.0, 7200.0 + 2 * DAY),  # intervals longer than retention
])
def test_row_retention(retention: float, longest: float, interval: float | None,
                       expected: float) -> None:
    assert row_retention(retention, longest, interval) == expected


def test_rows_left_to_the_drop_outlive_every_drop_horizon() -> None:
    """The backstop lies past the latest a partition can be dropped (upper bound + the
    longest retention, the upper bound at most one interval after a row's receipt)."""
    for interval in (60.0, 3600.0, DAY):
        for longest in (120.0, DAY, 30 * DAY):
            assert row_retention(longest, longest, interval) > longest + interval
