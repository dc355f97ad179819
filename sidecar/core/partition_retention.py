"""Partitioned retention's decisions, as pure functions of plain values: whether an ended
partition is due for its drop or kept (and why), what a detach's answer leads to, whether a
detached table is dropped or attached again, what a round reports, and what an answer of making
a partition ahead leads to. The PostgreSQL adapter
(``store/postgres/partition_upkeep.py``) reads the catalog, runs the statements and executes
these decisions. The design: docs/design.md, "Partitioned retention".
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, assert_never

DETACH_TRIES: Final = 5  # lock waits of one detach before the partition waits for next round
MAKE_TRIES: Final = 5  # tries of a table's partitions that made nothing, then next round
FIRST_PAUSE: Final = 0.05  # seconds: a pause after the first try; doubled each try after it


class KeepReason(enum.StrEnum):
    """Why an ended partition was kept: the ``reason`` of the ``partition_kept`` log line
    (docs/operations.md, "Partitioned retention", lists them for operators)."""

    INSIDE_RETENTION = "inside_retention"  # a provider with rows in it keeps them longer
    UNCONFIGURED_PROVIDER = "unconfigured_provider"  # rows of providers no longer configured
    DETACH_PENDING = "detach_pending"  # another's DETACH … CONCURRENTLY, interrupted
    BUSY = "busy"  # a live lease or a queue entry waiting or in flight: not detached
    LOOK_TIMEOUT = "look_timeout"  # too large to look at for work within the look's bound
    LOCKED = "locked"  # the detach's lock stayed held (a long transaction) through every try
    BUSY_AFTER_DETACH = "busy_after_detach"  # work found on the detached table: attached again
    LOCKED_DETACHED = "locked_detached"  # detached; the retire's lock wait gave up
    DETACHED_ERROR = "detached_error"  # detached by a round that died; cannot go (the error)


# Reasons whose rendering carries their detail after a colon, as operators read it.
_DETAILED: Final = frozenset({KeepReason.UNCONFIGURED_PROVIDER, KeepReason.DETACHED_ERROR})


@dataclass(frozen=True, slots=True)
class Kept:
    """The partition stays for a later round. ``str()`` is the log line's ``reason``:
    ``unconfigured_provider:a,b``, ``detached_error:<error>``, else the reason alone."""

    reason: KeepReason
    detail: str = ""  # the providers (sorted, comma-separated) or the error, for two reasons

    def __str__(self) -> str:
        return f"{self.reason}:{self.detail}" if self.reason in _DETAILED else str(self.reason)

    @property
    def worth_a_warning(self) -> bool:
        """Anything but a partition simply not due yet, which every round meets."""
        return self.reason is not KeepReason.INSIDE_RETENTION


@dataclass(frozen=True, slots=True)
class Dropped:
    """The partition was detached and dropped (with the dead queue entries of its events)."""


@dataclass(frozen=True, slots=True)
class Gone:
    """Another process (or an operator) detached, dropped or attached it meanwhile: not this
    round's to report."""


PartitionOutcome = Dropped | Kept | Gone


def reason_to_keep(*, pending: bool, age: float, providers: Sequence[str],
                   retention: Mapping[str, float]) -> Kept | None:
    """Why an ended partition is kept before any look for work, or None: due for its drop (the
    look for work runs with the detach). ``age``: seconds since its upper bound; ``providers``:
    those with rows in it (not read for a pending one); ``retention``: seconds by provider.
    A provider no longer configured keeps it: row retention never deletes such rows either."""
    if pending:
        return Kept(KeepReason.DETACH_PENDING)
    unknown = sorted(p for p in providers if p not in retention)
    if unknown:
        return Kept(KeepReason.UNCONFIGURED_PROVIDER, ",".join(unknown))
    longest = max((retention[p] for p in providers), default=0.0)
    if age <= longest:
        return Kept(KeepReason.INSIDE_RETENTION)
    return None


class DetachAnswer(enum.Enum):
    """What one try of ``webhook_partition_detach`` answered (its value or its error)."""

    DETACHED = enum.auto()  # true: detached, its bounds in its comment
    NOT_A_PARTITION = enum.auto()  # NULL: gone, or detached by another run meanwhile
    HOLDS_WORK = enum.auto()  # false: a live lease or a waiting queue entry
    WORK_ARRIVED = enum.auto()  # object_in_use: a queue entry re-driven since the look
    LOOK_TIMED_OUT = enum.auto()  # query_canceled: the look outlasted its statement_timeout
    LOCK_BUSY = enum.auto()  # lock_not_available or deadlock_detected: held by another


@dataclass(frozen=True, slots=True)
class Retire:
    """Detached: look at the table again and drop it, or attach it again (``RetireAction``)."""


@dataclass(frozen=True, slots=True)
class TryAgain:
    """Try the detach again after ``pause`` seconds (deliveries come first)."""

    pause: float


def after_detach(answer: DetachAnswer, attempt: int, tries: int = DETACH_TRIES
                 ) -> Retire | TryAgain | Kept | Gone:
    """The step after try ``attempt`` (from 0) of ``tries`` of the detach."""
    match answer:
        case DetachAnswer.DETACHED:
            return Retire()
        case DetachAnswer.NOT_A_PARTITION:
            return Gone()
        case DetachAnswer.HOLDS_WORK | DetachAnswer.WORK_ARRIVED:
            return Kept(KeepReason.BUSY)
        case DetachAnswer.LOOK_TIMED_OUT:
            return Kept(KeepReason.LOOK_TIMEOUT)
        case DetachAnswer.LOCK_BUSY:
            if attempt >= tries - 1:
                return Kept(KeepReason.LOCKED)  # a long transaction: the next round tries again
            return TryAgain(FIRST_PAUSE * 2 ** attempt)
        case _:
            assert_never(answer)


class RetireAction(enum.Enum):
    """What becomes of a detached table, decided under its ACCESS EXCLUSIVE lock."""

    LEAVE = enum.auto()  # gone, or attached again by another run: not ours to touch
    ATTACH_AGAIN = enum.auto()  # it holds work (the net under the looks before the detach)
    DROP = enum.auto()  # with the dead queue entries of its events


def retire_action(*, exists: bool, attached: bool, holds_work: bool) -> RetireAction:
    """``exists``: the table is still there; ``attached``: it is a partition again;
    ``holds_work``: for an event table a live lease or a queue entry waiting or in flight,
    for an attempt table an entry of its events waiting in the queue (never for nonces)."""
    if not exists or attached:
        return RetireAction.LEAVE
    return RetireAction.ATTACH_AGAIN if holds_work else RetireAction.DROP


def retired(action: RetireAction) -> PartitionOutcome:
    """The partition's outcome once ``action`` was carried out."""
    match action:
        case RetireAction.LEAVE:
            return Gone()
        case RetireAction.ATTACH_AGAIN:
            return Kept(KeepReason.BUSY_AFTER_DETACH)
        case RetireAction.DROP:
            return Dropped()
        case _:
            assert_never(action)


def round_report(outcomes: Iterable[tuple[str, PartitionOutcome]]
                 ) -> tuple[tuple[str, ...], tuple[tuple[str, Kept], ...]]:
    """A round's partitions dropped, and those kept with why, in the order looked at; those
    gone meanwhile are the other process's to report."""
    dropped: list[str] = []
    kept: list[tuple[str, Kept]] = []
    for name, outcome in outcomes:
        match outcome:
            case Dropped():
                dropped.append(name)
            case Kept():
                kept.append((name, outcome))
            case Gone():
                pass
            case _:
                assert_never(outcome)
    return tuple(dropped), tuple(kept)


class MakeAnswer(enum.Enum):
    """What one try of making a table's next partition (``webhook_partition_prepare_next``,
    then ``webhook_partition_attach_next``) answered."""

    NONE_DUE = enum.auto()  # the partitions reach ``ahead`` intervals past now already
    ATTACHED = enum.auto()  # made and attached by this try
    MADE_ELSEWHERE = enum.auto()  # another process made that range meanwhile
    BUSY = enum.auto()  # a lock, a row of the range that came in meanwhile, or the timeout

    @property
    def made_nothing(self) -> bool:
        """A try that counts toward ``MAKE_TRIES``."""
        return self in (MakeAnswer.MADE_ELSEWHERE, MakeAnswer.BUSY)


@dataclass(frozen=True, slots=True)
class MakeNext:
    """On to the table's next partition at once; ``made``: this try made one (count it)."""

    made: bool


@dataclass(frozen=True, slots=True)
class TableDone:
    """No more of this table's partitions this round; ``busy``: it stayed busy through every
    try (named in ``PartitionsMade.busy``, warned of, tried again next round: the partitions
    are made ``ahead``, so a round missed costs nothing)."""

    busy: bool = False


def after_make(answer: MakeAnswer, made_nothing: int, tries: int = MAKE_TRIES
               ) -> MakeNext | TryAgain | TableDone:
    """The step after a try; ``made_nothing``: this table's tries this round that made nothing,
    this one included."""
    match answer:
        case MakeAnswer.ATTACHED:
            return MakeNext(made=True)
        case MakeAnswer.NONE_DUE:
            return TableDone()
        case MakeAnswer.MADE_ELSEWHERE:  # on to the next range, boundedly
            return TableDone() if made_nothing >= tries else MakeNext(made=False)
        case MakeAnswer.BUSY:  # deliveries come first: a pause, doubled each time
            if made_nothing >= tries:
                return TableDone(busy=True)
            return TryAgain(FIRST_PAUSE * 2 ** made_nothing)
        case _:
            assert_never(answer)


@dataclass(frozen=True, slots=True)
class PartitionsRetired:
    """What one round of partition retention did (``PartitionUpkeep.retire``)."""

    dropped: tuple[str, ...] = ()  # partitions dropped
    kept: tuple[tuple[str, Kept], ...] = ()  # (partition, why) for ended partitions kept
    default_rows: int = 0  # rows in the DEFAULT partitions: inserts past the last partition
    # (partitioned table, bounded partitions attached, the last one's upper bound as Unix
    # time: new rows land in the DEFAULT partition past it; 0 with none), after the round
    extent: tuple[tuple[str, int, float], ...] = ()


@dataclass(frozen=True, slots=True)
class PartitionsMade:
    """What one round of making partitions ahead did (``PartitionUpkeep.make_ahead``)."""

    made: int = 0  # partitions made
    # tables whose partitions could not be made: busy (a lock) through every try; the next
    # round tries again
    busy: tuple[str, ...] = ()
