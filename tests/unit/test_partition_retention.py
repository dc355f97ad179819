"""The pure core of partitioned retention: why an ended partition is kept, what each answer of
the detach leads to, what becomes of a detached table, what a round reports, and what each
answer of making a partition ahead leads to."""

from __future__ import annotations

import pytest

from sidecar.core.partition_retention import (
    DETACH_TRIES,
    FIRST_PAUSE,
    MAKE_TRIES,
    DetachAnswer,
    Dropped,
    Gone,
    KeepReason,
    Kept,
    MakeAnswer,
    MakeNext,
    Retire,
    RetireAction,
    TableDone,
    TryAgain,
    after_detach,
    after_make,
    reason_to_keep,
    retire_action,
    retired,
    round_report,
)

HOUR = 3600.0
RETENTION = {"stripe": 2 * HOUR, "github": 24 * HOUR}


# -- why an ended partition is kept before any look for work ---------------------------------

@pytest.mark.parametrize(("pending", "age", "providers", "expected"), [
    # a DETACH … CONCURRENTLY left pending is an operator's: kept, whatever else holds
    (True, 99 * HOUR, (), Kept(KeepReason.DETACH_PENDING)),
    (True, 99 * HOUR, ("gone",), Kept(KeepReason.DETACH_PENDING)),
    # providers no longer configured keep it, named sorted, however old
    (False, 99 * HOUR, ("zeta", "stripe", "alpha"),
     Kept(KeepReason.UNCONFIGURED_PROVIDER, "alpha,zeta")),
    (False, 0.0, ("gone",), Kept(KeepReason.UNCONFIGURED_PROVIDER, "gone")),
    # the longest retention of its providers decides; the bound itself is still inside
    (False, 3 * HOUR, ("stripe", "github"), Kept(KeepReason.INSIDE_RETENTION)),
    (False, 24 * HOUR, ("github",), Kept(KeepReason.INSIDE_RETENTION)),
    (False, 2 * HOUR, ("stripe",), Kept(KeepReason.INSIDE_RETENTION)),
    (False, 2 * HOUR + 1, ("stripe",), None),
    (False, 24 * HOUR + 1, ("stripe", "github"), None),
    # an empty partition ended is due at once
    (False, 0.5, (), None),
])
def test_reason_to_keep(pending: bool, age: float, providers: tuple[str, ...],
                        expected: Kept | None) -> None:
    assert reason_to_keep(pending=pending, age=age, providers=providers,
                          retention=RETENTION) == expected


@pytest.mark.parametrize(("kept", "rendered", "warns"), [
    # the `reason` field of the partition_kept line, as docs/operations.md lists it
    (Kept(KeepReason.INSIDE_RETENTION), "inside_retention", False),
    (Kept(KeepReason.UNCONFIGURED_PROVIDER, "a,b"), "unconfigured_provider:a,b", True),
    (Kept(KeepReason.DETACH_PENDING), "detach_pending", True),
    (Kept(KeepReason.BUSY), "busy", True),
    (Kept(KeepReason.LOOK_TIMEOUT), "look_timeout", True),
    (Kept(KeepReason.LOCKED), "locked", True),
    (Kept(KeepReason.BUSY_AFTER_DETACH), "busy_after_detach", True),
    (Kept(KeepReason.LOCKED_DETACHED), "locked_detached", True),
    (Kept(KeepReason.DETACHED_ERROR, "UndefinedColumnError: x"),
     "detached_error:UndefinedColumnError: x", True),
    (Kept(KeepReason.DETACHED_ERROR), "detached_error:", True),
])
def test_a_kept_partition_renders_its_reason_as_the_log_line_says_it(
        kept: Kept, rendered: str, warns: bool) -> None:
    assert str(kept) == rendered
    assert kept.worth_a_warning is warns


def test_every_reason_is_rendered_in_the_table_above() -> None:
    """A reason added without its line in docs/operations.md shows here first."""
    assert {r.value for r in KeepReason} == {
        "inside_retention", "unconfigured_provider", "detach_pending", "busy", "look_timeout",
        "locked", "busy_after_detach", "locked_detached", "detached_error"}


# -- the detach's answers ------------------------------------------------------------------

@pytest.mark.parametrize(("answer", "expected"), [
    (DetachAnswer.DETACHED, Retire()),
    (DetachAnswer.NOT_A_PARTITION, Gone()),
    (DetachAnswer.HOLDS_WORK, Kept(KeepReason.BUSY)),
    (DetachAnswer.WORK_ARRIVED, Kept(KeepReason.BUSY)),
    (DetachAnswer.LOOK_TIMED_OUT, Kept(KeepReason.LOOK_TIMEOUT)),
    (DetachAnswer.LOCK_BUSY, TryAgain(FIRST_PAUSE)),
])
def test_the_first_detach_try(answer: DetachAnswer, expected: object) -> None:
    assert after_detach(answer, 0) == expected


def test_a_busy_lock_is_tried_again_with_a_doubling_pause_then_kept_locked() -> None:
    steps = [after_detach(DetachAnswer.LOCK_BUSY, attempt) for attempt in range(DETACH_TRIES)]
    assert steps == [TryAgain(FIRST_PAUSE * 2 ** n) for n in range(DETACH_TRIES - 1)] + [
        Kept(KeepReason.LOCKED)]
    assert after_detach(DetachAnswer.LOCK_BUSY, 0, tries=1) == Kept(KeepReason.LOCKED)


@pytest.mark.parametrize("answer", [a for a in DetachAnswer if a is not DetachAnswer.LOCK_BUSY])
def test_only_a_busy_lock_is_tried_again_even_on_the_last_try(answer: DetachAnswer) -> None:
    assert after_detach(answer, DETACH_TRIES - 1) == after_detach(answer, 0)


# -- a detached table, under its lock ------------------------------------------------------

@pytest.mark.parametrize(("exists", "attached", "holds_work", "action", "outcome"), [
    (False, False, False, RetireAction.LEAVE, Gone()),  # dropped by another run
    (False, False, True, RetireAction.LEAVE, Gone()),
    (True, True, False, RetireAction.LEAVE, Gone()),  # attached again by another run
    (True, True, True, RetireAction.LEAVE, Gone()),
    (True, False, True, RetireAction.ATTACH_AGAIN, Kept(KeepReason.BUSY_AFTER_DETACH)),
    (True, False, False, RetireAction.DROP, Dropped()),
])
def test_retire_action(exists: bool, attached: bool, holds_work: bool,
                       action: RetireAction, outcome: object) -> None:
    assert retire_action(exists=exists, attached=attached, holds_work=holds_work) is action
    assert retired(action) == outcome


# -- the round's report -----------------------------------------------------------------------

def test_a_round_reports_drops_and_keeps_in_order_and_leaves_out_the_gone() -> None:
    outcomes = [("p1", Dropped()), ("p2", Kept(KeepReason.BUSY)), ("p3", Gone()),
                ("p4", Dropped()), ("p5", Kept(KeepReason.UNCONFIGURED_PROVIDER, "x"))]
    assert round_report(outcomes) == (
        ("p1", "p4"),
        (("p2", Kept(KeepReason.BUSY)), ("p5", Kept(KeepReason.UNCONFIGURED_PROVIDER, "x"))))
    assert round_report([]) == ((), ())


# -- making a table's partitions ahead ------------------------------------------------------

@pytest.mark.parametrize(("answer", "made_nothing", "expected"), [
    (MakeAnswer.ATTACHED, 0, MakeNext(made=True)),
    (MakeAnswer.ATTACHED, MAKE_TRIES - 1, MakeNext(made=True)),
    (MakeAnswer.NONE_DUE, 0, TableDone()),
    (MakeAnswer.NONE_DUE, MAKE_TRIES - 1, TableDone()),
    # another process made that range: on to the next at once, but not for ever
    (MakeAnswer.MADE_ELSEWHERE, 1, MakeNext(made=False)),
    (MakeAnswer.MADE_ELSEWHERE, MAKE_TRIES - 1, MakeNext(made=False)),
    (MakeAnswer.MADE_ELSEWHERE, MAKE_TRIES, TableDone()),
    # busy: a pause doubling from the first, then the table is named busy
    (MakeAnswer.BUSY, 1, TryAgain(2 * FIRST_PAUSE)),
    (MakeAnswer.BUSY, 2, TryAgain(4 * FIRST_PAUSE)),
    (MakeAnswer.BUSY, MAKE_TRIES - 1, TryAgain(FIRST_PAUSE * 2 ** (MAKE_TRIES - 1))),
    (MakeAnswer.BUSY, MAKE_TRIES, TableDone(busy=True)),
])
def test_after_make(answer: MakeAnswer, made_nothing: int, expected: object) -> None:
    assert after_make(answer, made_nothing) == expected


def test_only_tries_that_made_nothing_count() -> None:
    assert {a for a in MakeAnswer if a.made_nothing} == {MakeAnswer.MADE_ELSEWHERE,
                                                          MakeAnswer.BUSY}


def test_a_table_busy_on_every_try_is_given_up_after_make_tries_with_the_pauses_between() -> None:
    """The loop the adapter runs, on a table that stays locked."""
    steps, made_nothing = [], 0
    while True:
        made_nothing += MakeAnswer.BUSY.made_nothing
        steps.append(step := after_make(MakeAnswer.BUSY, made_nothing))
        if isinstance(step, TableDone):
            break
    assert steps == [TryAgain(FIRST_PAUSE * 2 ** n) for n in range(1, MAKE_TRIES)] + [
        TableDone(busy=True)]
