"""Every result a delivery is counted as (``core.answers.Result``, the ``result`` label of
``webhook_events_total``) is documented, read from the code rather than from a list kept here:
docs/operations.md names each one where it introduces its metrics, has a row for each in its
result table, and that row gives the status of every refusal counted under it
(``core.answers.RULES``). A new result or refusal that is not documented fails here."""

from __future__ import annotations

import re

from sidecar.core.answers import RULES, Result
from tests.deploy.chart_support import REPO

OPERATIONS = REPO / "docs" / "operations.md"
RESULTS = {result.value for result in Result}
# Refusals made before any provider route is chosen (no provider label): logged as `rejected`,
# never counted in webhook_events_total.
UNCOUNTED = {"unknown_path", "method_not_allowed"}


def operations_rows() -> dict[str, str]:
    """The result table of docs/operations.md: each result and the rest of its row."""
    text = OPERATIONS.read_text(encoding="utf-8")
    table = text.split("| result | what happened | normal? |\n", 1)[1].split("\n\n", 1)[0]
    rows = {}
    for line in table.splitlines()[1:]:  # after the |---| line
        found = re.fullmatch(r"\| `(\w+)` \|(.+)\|", line)
        assert found, f"not a result row: {line!r}"
        assert found.group(1) not in rows, f"{found.group(1)} has two rows"
        rows[found.group(1)] = found.group(2)
    return rows


def test_every_result_has_a_row_in_the_operations_table() -> None:
    assert set(operations_rows()) == RESULTS


def test_the_metrics_introduction_lists_every_result() -> None:
    text = OPERATIONS.read_text(encoding="utf-8")
    listed = text.split("`webhook_events_total{provider,result}`, results", 1)[1]
    listed = listed.split("(", 1)[0]  # up to the remark after the list
    assert set(re.findall(r"`(\w+)`", listed)) == RESULTS


def test_each_refusal_s_status_is_in_the_row_of_its_result() -> None:
    rows = operations_rows()
    for name, rule in RULES.items():
        if rule.status and name not in UNCOUNTED:  # 0: the status comes from the outcome
            assert re.search(rf"\b{rule.status}\b", rows[rule.result.value]), (
                f"{name}: {rule.status} is not in the row of {rule.result.value}")
