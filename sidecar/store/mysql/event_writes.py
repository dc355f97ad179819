"""The event verbs of more than one statement (a claim, a take-over, a result write, a nonce
bind, a purge), and the writes of one kind sent together in one transaction."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import asyncmy

from sidecar.core.errors import StoreError
from sidecar.core.events import Claim, Replayed
from sidecar.store.mysql.tx import LOCK_WAIT, Duplicate, Row, Step, Tx, describe, exists
from sidecar.store.rows import Params, event_row, nonce_binding


async def together(tx: Tx, step: Callable[[Tx, Params], Awaitable[Any]],
                   batch: Sequence[Params], verb: str) -> list[Any]:
    """Writes of one kind that waited, in arrival order in the caller's one transaction, each
    answered as if it had run alone at its place (a later claim of a key an earlier one
    inserted finds that row and loses). Each runs inside a savepoint: one that fails with a
    statement error is rolled back alone and answered with it; a failure of the transaction
    itself (a deadlock, a lost connection) raises, and _run sends the whole batch again or
    fails every call of it."""
    answers: list[Any] = []
    for params in batch:
        await tx.count("savepoint", {})
        try:
            answers.append(await step(tx, params))
        except (asyncmy.errors.IntegrityError, asyncmy.errors.DataError,
                asyncmy.errors.ProgrammingError, asyncmy.errors.OperationalError,
                StoreError) as exc:
            if isinstance(exc, asyncmy.errors.OperationalError) and not (
                    exc.args and exc.args[0] == LOCK_WAIT):
                raise  # the transaction is lost (a deadlock, the connection): every call
            await tx.count("rollback_to_savepoint", {})
            error = StoreError(f"{verb}: {describe(exc)}")
            error.__cause__ = exc
            answers.append(error)
        await tx.count("release_savepoint", {})
    return answers


async def claim(tx: Tx, params: Params) -> Claim | Replayed:
    """The guard (if any) bound first, then the row inserted, or the existing one read with a
    shared lock (so that it is the committed row, under any isolation level). On a Galera
    cluster a claim that lost to another node's commit of the same key is rolled back (1213)
    and run again by _run: then its insert meets that row, and it loses here like any other
    (docs/design.md, "Galera")."""
    binding = None
    if params["guard_key"] is not None:
        guard = {"provider": params["provider"], "nonce": params["guard_key"],
                 "body_sha256": params["guard_digest"]}
        try:
            await tx.insert("bind_nonce", guard)
        except Duplicate:
            pass
        bound = await tx.rows("get_nonce", guard)
        if not bound:
            raise StoreError("claim: the guard was purged while it was bound")
        binding = nonce_binding(bound[0])
        if binding.digest != params["guard_digest"]:
            return Replayed(binding)
    try:
        inserted = await tx.insert("claim", params)
    except Duplicate:
        existing = await tx.rows("get_locked", params)
        if not existing:  # the shared lock of the duplicate holds the row: never
            raise StoreError("claim: the existing row vanished") from None
        return Claim(won=False, row=event_row(existing[0]), binding=binding)
    if inserted != 1:
        raise StoreError("claim: the guard changed under its lock")
    [row] = await tx.rows("get", params)
    return Claim(won=True, row=event_row(row), binding=binding)


async def take_over(tx: Tx, params: Params) -> list[Row]:
    if not await tx.count("take_over", params):
        return []
    return await tx.rows("attempt_of", params)


async def release(tx: Tx, params: Params) -> list[Row]:
    return [{"released": 1}] if await tx.count("release", params) else []


async def complete(tx: Tx, params: Params) -> list[Row]:
    """The row locked under the fence, written, and its attempt recorded in the timeline."""
    locked = await tx.rows("complete_lock", params)
    if not locked:
        return []
    await tx.count("complete", params)
    await tx.insert("record_attempt", {**params, "lease_owner": locked[0]["lease_owner"],
                                       "error": None})
    return [{"attempt": params["attempt"]}]


async def bind_nonce(tx: Tx, params: Params) -> list[Row]:
    """Inserted, or bound already (by a committed insert, or by an earlier bind of the same
    batch): either way the binding as get_nonce.sql reads it."""
    await exists(tx, "bind_nonce", params)
    return await tx.rows("get_nonce", params)


def deleting(name: str) -> Step:
    async def step(tx: Tx, params: Params) -> list[Row]:
        return [{"deleted": await tx.count(name, params)}]
    return step
