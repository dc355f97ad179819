"""What a SQLite call runs on the worker thread when it is more than one statement: each in one
``BEGIN IMMEDIATE`` transaction, so nothing changes between its statements and they commit or
roll back together. Claims, result writes, nonce binds, and queue mode's enqueues and settles
sent together share one, whatever their kinds (:func:`together`); queue mode writes the event
row and its queue entry, one table per statement."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, Final, NamedTuple

from sidecar.core.events import Claim, Enqueued, Replayed
from sidecar.store.rows import Params, event_row, nonce_binding
from sidecar.store.sqlite.connection import execute, immediate

# -- the claim, and writes sent together ------------------------------------------------------


def claim(con: sqlite3.Connection, params: Params) -> Claim | Replayed:
    with immediate(con):
        return _claim_in_transaction(con, params)


def _claim_in_transaction(con: sqlite3.Connection, params: Params) -> Claim | Replayed:
    """The guard (when the claim carries one) bound, then the claim, under one write lock:
    a guard bound to another digest answers ``Replayed`` before anything else is written."""
    binding = None
    if params["guard_key"] is not None:
        guard = {"provider": params["provider"], "nonce": params["guard_key"],
                 "body_sha256": params["guard_digest"]}
        bound = execute(con, "bind_nonce", guard) or execute(con, "get_nonce", guard)
        binding = nonce_binding(bound[0])
        if binding.digest != params["guard_digest"]:
            return Replayed(binding)
    inserted = execute(con, "claim", params)
    if inserted:
        return Claim(won=True, row=event_row(inserted[0]), binding=binding)
    existing = execute(con, "get", params)
    if not existing:  # impossible under the write lock; never report a claim we lack
        key = f"{params['provider']}:{params['event_id']}"
        raise sqlite3.IntegrityError(f"claim of {key} found no row")
    return Claim(won=False, row=event_row(existing[0]), binding=binding)


def complete(con: sqlite3.Connection, params: Params) -> list[sqlite3.Row]:
    """A result write: its attempt recorded in the timeline, then the row written, under one
    fence (complete_fence.fragment.sql); the row written (the attempt), or none when
    superseded (nothing recorded either)."""
    with immediate(con):
        return _complete_in_transaction(con, params)


def _complete_in_transaction(con: sqlite3.Connection, params: Params) -> list[sqlite3.Row]:
    execute(con, "complete_attempt", params)
    return execute(con, "complete", params)


def _bind_in_transaction(con: sqlite3.Connection, params: Params) -> list[sqlite3.Row]:
    """The bound hash: under the write lock the nonce a bind did not insert is there to read
    (get_nonce.sql). (Alone, a bind is bind_nonce.sql, a statement of its own.)"""
    return execute(con, "bind_nonce", params) or execute(con, "get_nonce", params)


# -- queue mode: the row and its entry --------------------------------------------------------


def enqueue(con: sqlite3.Connection, params: Params) -> Enqueued:
    with immediate(con):
        return _enqueue_in_transaction(con, params)


def _enqueue_in_transaction(con: sqlite3.Connection, params: Params) -> Enqueued:
    if execute(con, "enqueue_event", params):
        execute(con, "enqueue_entry", params)
        return Enqueued(accepted=True, row=None)
    # Nothing inserted: under the write lock, either the key is there (answered as it is,
    # full queue or not) or the queue is full.
    existing = execute(con, "get", params)
    if existing:
        return Enqueued(accepted=False, row=event_row(existing[0]))
    return Enqueued(accepted=False, row=None, full=True)


def take_queued(con: sqlite3.Connection, params: Params) -> list[dict[str, Any]]:
    """The picks, each taken (entry, then row), answered in the order picked."""
    taken: list[dict[str, Any]] = []
    with immediate(con):
        for pick in execute(con, "take_queued_pick", params):
            key = {**params, "event_id": pick["event_id"]}
            (entry,) = execute(con, "take_queued_entry", key)
            (row,) = execute(con, "take_queued_event", key)
            taken.append({
                "event_id": row["event_id"],
                "attempt": row["attempt"],
                "tries": entry["tries"],
                "round_attempts": row["attempt"] - entry["base_attempt"],
                "queued_at": entry["queued_at"],
                "now": row["now"],
                "payload_body": row["payload_body"],
                "payload_request": row["payload_request"],
            })
    return taken


def settle_queued(con: sqlite3.Connection, params: Params) -> list[sqlite3.Row]:
    """The try recorded in the timeline and the row written, under one fence
    (settle_fence.fragment.sql); only if it was written, the entry's (removed when done)."""
    with immediate(con):
        return _settle_in_transaction(con, params)


def _settle_in_transaction(con: sqlite3.Connection, params: Params) -> list[sqlite3.Row]:
    execute(con, "settle_queued_attempt", params)
    written = execute(con, "settle_queued_event", params)
    if written:
        step = "settle_queued_done" if params["state"] == "done" else "settle_queued_entry"
        execute(con, step, params)
    return written


def requeue_dead(con: sqlite3.Connection, params: Params) -> list[sqlite3.Row]:
    """The entries re-driven, then each one's row; answered in order of acceptance."""
    with immediate(con):
        entries = sorted(execute(con, "requeue_dead_entries", params),
                         key=lambda entry: int(entry["seq"]))
        for entry in entries:
            execute(con, "requeue_dead_event", {**params, "event_id": entry["event_id"]})
    return entries


# -- writes sent together --------------------------------------------------------------------


class Write(NamedTuple):
    """A claim, result write, nonce bind, enqueue or settle waiting to be sent: its verb (a key
    of ``_STEPS``) and its parameters."""

    verb: str
    params: Params


# Each verb inside a shared transaction, answered as if it ran alone at its place in the order.
_STEPS: Final[dict[str, Callable[[sqlite3.Connection, Params], Any]]] = {
    # A later claim of a key an earlier one inserted finds its row and loses, as the second
    # of two concurrent claims would.
    "claim": _claim_in_transaction,
    # Fenced (and recorded) by its attempt, as alone: a stale attempt writes nothing.
    "complete": _complete_in_transaction,
    # A later bind of a nonce an earlier one bound gets the earlier one's hash back.
    "bind_nonce": _bind_in_transaction,
    # A later enqueue of a key an earlier one inserted finds its row (existing), as the second
    # of two concurrent enqueues would; each counts the entries earlier ones added toward its
    # queue's depth.
    "enqueue": _enqueue_in_transaction,
    # Fenced by its entry's take counter, as alone: the same entry twice writes once.
    "settle_queued": _settle_in_transaction,
}


def together(con: sqlite3.Connection, writes: Sequence[Write]) -> list[Any]:
    """Claims, result writes and binds, of any kinds, in one ``BEGIN IMMEDIATE`` transaction
    and one commit (one WAL fsync), in order; each write's answer, or the ``sqlite3.Error`` it
    failed with.

    Each write runs inside a savepoint of its own: one that fails is rolled back alone (none
    of its statements stays) and answered with its error, and the others still commit. If
    the transaction itself is lost (its COMMIT fails, or SQLite rolled it back after an error
    such as a full disk), nothing of it was written and this raises: every write fails."""
    answers: list[Any] = []
    with immediate(con):
        for verb, params in writes:
            con.execute("SAVEPOINT one_write")
            try:
                answer = _STEPS[verb](con, params)
            except sqlite3.Error as exc:
                if not con.in_transaction:  # SQLite rolled back everything: nothing stays
                    raise
                con.execute("ROLLBACK TO one_write")
                answer = exc
            con.execute("RELEASE one_write")
            answers.append(answer)
    return answers
