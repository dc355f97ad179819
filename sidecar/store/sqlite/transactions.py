"""What a SQLite call runs on the worker thread when it is more than one statement: each in one
``BEGIN IMMEDIATE`` transaction, so nothing changes between its statements and they commit or
roll back together. Claims, result writes and nonce binds sent together share one, and so do
queue mode's enqueues and settles; queue mode writes the event row and its queue entry, one
table per statement."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from sidecar.core.events import Claim, Enqueued
from sidecar.store.rows import Params, event_row
from sidecar.store.sqlite.connection import execute, immediate

# -- the claim, and writes sent together ------------------------------------------------------


def claim(con: sqlite3.Connection, params: Params) -> Claim:
    with immediate(con):
        return _claim_in_transaction(con, params)


def claims(con: sqlite3.Connection, items: Sequence[Params]) -> list[Claim]:
    """Several claims in one transaction, in order: a later claim of a key an earlier one
    inserted finds its row and loses, as the second of two concurrent claims would."""
    with immediate(con):
        return [_claim_in_transaction(con, params) for params in items]


def _claim_in_transaction(con: sqlite3.Connection, params: Params) -> Claim:
    inserted = execute(con, "claim", params)
    if inserted:
        return Claim(won=True, row=event_row(inserted[0]))
    existing = execute(con, "get", params)
    if not existing:  # impossible under the write lock; never report a claim we lack
        key = f"{params['provider']}:{params['event_id']}"
        raise sqlite3.IntegrityError(f"claim of {key} found no row")
    return Claim(won=False, row=event_row(existing[0]))


def complete(con: sqlite3.Connection, params: Params) -> list[sqlite3.Row]:
    """A result write: its attempt recorded in the timeline, then the row written, under one
    fence (complete_fence.fragment.sql); the row written (the attempt), or none when
    superseded (nothing recorded either)."""
    with immediate(con):
        return _complete_in_transaction(con, params)


def completes(con: sqlite3.Connection, items: Sequence[Params]) -> list[list[sqlite3.Row]]:
    """Several result writes in one transaction, each fenced (and recorded) as alone."""
    with immediate(con):
        return [_complete_in_transaction(con, params) for params in items]


def _complete_in_transaction(con: sqlite3.Connection, params: Params) -> list[sqlite3.Row]:
    execute(con, "complete_attempt", params)
    return execute(con, "complete", params)


def binds(con: sqlite3.Connection, items: Sequence[Params]) -> list[list[sqlite3.Row]]:
    """Several binds in one transaction, in order, each answered with the bound hash: a
    later bind of a nonce an earlier one bound gets the earlier one's hash back, as the
    second of two concurrent binds would. Under the write lock the nonce a bind did not
    insert is there to read (get_nonce.sql)."""
    with immediate(con):
        return [execute(con, "bind_nonce", params) or execute(con, "get_nonce", params)
                for params in items]


# -- queue mode: the row and its entry --------------------------------------------------------


def enqueue(con: sqlite3.Connection, params: Params) -> Enqueued:
    with immediate(con):
        return _enqueue_in_transaction(con, params)


def enqueues(con: sqlite3.Connection, items: Sequence[Params]) -> list[Enqueued]:
    """Several enqueues in one transaction, in order: a later enqueue of a key an earlier one
    inserted finds its row (existing), as the second of two concurrent enqueues would; each
    counts the entries the earlier ones added toward its queue's depth."""
    with immediate(con):
        return [_enqueue_in_transaction(con, params) for params in items]


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


def settles(con: sqlite3.Connection, items: Sequence[Params]) -> list[list[sqlite3.Row]]:
    """Several settles in one transaction, each fenced (and recorded) as alone."""
    with immediate(con):
        return [_settle_in_transaction(con, params) for params in items]


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
