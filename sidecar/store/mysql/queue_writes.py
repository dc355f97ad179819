"""Queue mode's verbs: enqueue, take (in order of an order key, or not), settle, requeue."""

from __future__ import annotations

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


async def take_queued_in_order(tx: Tx, params: Params) -> list[Row]:
    """A provider with an order key: its takes run one after another, so that each sees the
    previous one's commit. The transaction first writes the provider's row of
    webhook_take_lock (take_lock.sql): a second take on this server waits for that row lock;
    on a Galera cluster a take on another node that wrote the row too fails certification
    (1213) and runs again, after this one (docs/design.md, "Galera")."""
    await tx.count("take_lock", params)
    return await take_queued(tx, params)


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
