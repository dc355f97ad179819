"""Which failed MySQL store calls are an outage (reported once, with its end), and which are
the server answering one statement."""

from __future__ import annotations

import asyncmy
import pytest

from sidecar.core.errors import RowLocked, StoreClosed, StoreError
from sidecar.store.mysql.outage import Outage, is_outage


def failed(cause: BaseException | None, kind: type[StoreError] = StoreError) -> StoreError:
    error = kind("claim: failed")
    error.__cause__ = cause
    return error


@pytest.mark.parametrize(("cause", "outage"), [
    (asyncmy.errors.OperationalError(2003, "Can't connect to MySQL server"), True),
    (asyncmy.errors.OperationalError(2013, "Lost connection to MySQL server during query"), True),
    (asyncmy.errors.OperationalError(1927, "Connection was killed"), True),
    (asyncmy.errors.OperationalError(1047, "WSREP has not yet prepared node"), True),
    (asyncmy.errors.InterfaceError(0, ""), True),
    (TimeoutError(), True),
    (ConnectionResetError(), True),
    (asyncmy.errors.IntegrityError(1062, "Duplicate entry"), False),
    (asyncmy.errors.OperationalError(1213, "Deadlock found"), False),
    (asyncmy.errors.DataError(1406, "Data too long"), False),
])
def test_a_failed_call_is_an_outage_when_the_server_is_gone(cause: BaseException,
                                                            outage: bool) -> None:
    assert is_outage(failed(cause)) is outage


def test_a_held_row_or_a_closed_store_is_no_outage() -> None:
    gone = asyncmy.errors.OperationalError(2013, "Lost connection")
    assert not is_outage(failed(gone, RowLocked))
    assert not is_outage(failed(gone, StoreClosed))


class Seen:
    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []

    def unavailable(self, error: str, driver_error: BaseException | None) -> None:
        self.events.append(("unavailable", driver_error))

    def recovered(self, outage_seconds: float, failed_calls: int) -> None:
        self.events.append(("recovered", (outage_seconds, failed_calls)))


def test_an_outage_is_reported_once_with_its_end() -> None:
    seen, now = Seen(), [10.0]
    outage = Outage(seen, clock=lambda: now[0])  # type: ignore[arg-type]
    outage.succeeded()  # nothing to end
    gone = asyncmy.errors.OperationalError(2003, "Can't connect")
    for _ in range(3):
        outage.failed(failed(gone))
    outage.failed(failed(asyncmy.errors.IntegrityError(1062, "Duplicate entry")))
    now[0] = 12.5
    outage.succeeded()
    outage.succeeded()
    assert seen.events == [("unavailable", gone), ("recovered", (2.5, 3))]
