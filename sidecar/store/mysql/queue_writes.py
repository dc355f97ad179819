"""Queue mode's verbs: enqueue, take (in order of an order key, or not), settle, requeue.

A provider with an order key takes one take at a time, under a lock that differs with the
server: a named lock (``GET_LOCK``) on one server, which writes nothing; a written row on a
Galera cluster, where a named lock is local to one node (docs/design.md, "Galera")."""

from __future__ import annotations

from sidecar.core.errors import StoreError
from sidecar.core.events import Enqueued
from sidecar.store.mysql.tx import Duplicate, Row, Tx
from sidecar.store.rows import Params, event_row


async def enqueue(tx: Tx, params: Params) -> Enqueued:
    max_depth = params["max_depth"]
    room = {**params, "depth_limit": int(str(max_depth)) if max_depth is not None else 0}
    [has_room] = await tx.rows("enqueue_room", room)
    if has_room["ok"]:
        try:
            await tx.insert("enqueue_event", params)
        except Duplicate:
            pass
        else:
            await tx.insert("enqueue_entry", params)
            return Enqueued(accepted=True, row=None)
    existing = await tx.rows("get_locked", params)
    if existing:
        return Enqueued(accepted=False, row=event_row(existing[0]))
    return Enqueued(accepted=False, row=None, full=True)


async def take_queued(tx: Tx, params: Params) -> list[Row]:
    taken: list[Row] = []
    for pick in await tx.rows("take_queued_pick", params):
        key = {**params, "event_id": pick["event_id"]}
        await tx.count("take_queued_entry", key)
        await tx.count("take_queued_event", key)
        taken.extend(await tx.rows("take_queued_read", key))
    return taken


async def take_queued_under_lock_row(tx: Tx, params: Params) -> list[Row]:
    """An ordered take on a Galera node, in the caller's transaction: first the provider's row
    of webhook_take_lock written (take_lock_row.sql). A second take on this node waits for that
    row lock; a take on another node that wrote the row too fails certification (1213) and
    runs again, after this one, seeing its commit (docs/design.md, "Galera")."""
    await tx.count("take_lock_row", params)
    return await take_queued(tx, params)


async def take_queued_under_named_lock(tx: Tx, params: Params, wait: float) -> list[Row]:
    """An ordered take on one server: a named lock taken before the transaction begins, so
    the provider's takes run one after another and each sees the previous one's commit."""
    lock = {"provider": params["provider"], "wait": wait}
    [held] = await tx.rows("take_lock", lock)
    if not held["locked"]:
        raise StoreError("take_queued: another take of this provider held on")
    try:
        async with tx.transaction():
            return await take_queued(tx, params)
    finally:
        await tx.rows("take_unlock", lock)


async def settle_queued(tx: Tx, params: Params) -> list[Row]:
    """The entry and row locked under the fence (the take's try count), the row written, the
    try recorded, then the entry removed (done) or made due again (or dead)."""
    locked = await tx.rows("settle_lock", params)
    if not locked:
        return []
    await tx.count("settle_queued_event", params)
    await tx.insert("record_attempt", {**params, "attempt": locked[0]["attempt"],
                                       "lease_owner": locked[0]["lease_owner"]})
    step = "settle_queued_done" if params["state"] == "done" else "settle_queued_entry"
    await tx.count(step, params)
    return await tx.rows("attempt_of", params)


async def requeue_dead(tx: Tx, params: Params) -> list[Row]:
    picked = await tx.rows("requeue_dead_pick", params)
    for pick in picked:
        key = {**params, "event_id": pick["event_id"], "attempt": pick["attempt"]}
        await tx.count("requeue_dead_entry", key)
        await tx.count("requeue_dead_event", key)
    return [{"event_id": p["event_id"]} for p in picked]
