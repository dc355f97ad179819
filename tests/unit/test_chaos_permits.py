"""The chaos checker's two delivery-limit invariants on synthetic histories: the app never has
more requests in flight than ``delivery.concurrency`` (killed replicas' included), and after
the last kill's lease the survivors fill every slot again."""

from __future__ import annotations

from dataclasses import replace

from bench.chaos.history import Kill, Receipt
from bench.chaos.invariants import Invariant, check, most_in_flight
from tests.unit.test_chaos_invariants import clean, violated

LEASE = 4.0


def at_app(event_id: str, arrived: float, answered: float | None) -> Receipt:
    return Receipt(event_id, 1, arrived, 200 if answered is not None else None, answered)


def test_most_in_flight_counts_overlaps_and_an_answer_frees_its_slot_first() -> None:
    receipts = [at_app("a", 0.0, 1.0), at_app("b", 0.5, 2.0), at_app("c", 1.0, 1.5),
                at_app("d", 2.0, 3.0)]
    assert most_in_flight(receipts, LEASE) == 2  # a ends as c arrives; b ends as d arrives
    assert most_in_flight(receipts, LEASE, after=1.6) == 1


def test_a_request_never_answered_holds_its_slot_until_its_lease_ends() -> None:
    receipts = [at_app("a", 0.0, None), at_app("b", 3.0, 3.5), at_app("c", 4.5, 5.0)]
    assert most_in_flight(receipts, LEASE) == 2
    assert most_in_flight(receipts, LEASE, after=4.1) == 1


def limited(receipts: list[Receipt], kills: tuple[Kill, ...] = ()) -> set[Invariant]:
    h = replace(clean(), concurrency=2, lease=LEASE, kills=kills)
    h.receipts = [*h.receipts, *receipts]
    return violated(h) & {Invariant.WITHIN_CONCURRENCY, Invariant.FULL_AGAIN}


def test_three_at_once_over_a_concurrency_of_two_is_caught() -> None:
    assert limited([at_app("x", 1.0, 2.0), at_app("y", 1.2, 2.0), at_app("z", 1.5, 1.8)]) == {
        Invariant.WITHIN_CONCURRENCY}
    assert limited([at_app("x", 1.0, 2.0), at_app("y", 1.2, 2.0)]) == set()


def test_after_the_kills_lease_the_slots_must_be_full_again() -> None:
    kill = (Kill(0, 2.0, 2.5),)  # back at 2.5: the lease ends at 6.5, checked from 7.5
    after = [at_app("x", 8.0, 9.0), at_app("y", 8.5, 9.5)]
    assert limited(after, kill) == set()
    assert limited(after[:1], kill) == {Invariant.FULL_AGAIN}
    # Full only before the lease ended does not count.
    assert limited([at_app("x", 3.0, 4.0), at_app("y", 3.0, 4.0), after[0]], kill) == {
        Invariant.FULL_AGAIN}


def test_without_a_concurrency_neither_applies() -> None:
    h = clean()
    h.kills = (Kill(0, 1.0, 1.5),)
    assert not {v.invariant for v in check(h)} & {Invariant.WITHIN_CONCURRENCY,
                                                  Invariant.FULL_AGAIN}
