"""The retire of a detached partition (``PartitionKeeper``): in the caller's transaction, the
table locked, looked at again now that no proxy reaches it, then dropped or attached again as
``core.partition_retention.retire_action`` decides. Single statements (``partitioning/*.sql``)
and DDL built by :mod:`~sidecar.store.postgres.partition_ddl`; docs/design.md, "Partitioned
retention".
"""

from __future__ import annotations

from datetime import datetime
from typing import Final, assert_never

import asyncpg

from sidecar.core.partition_retention import RetireAction, retire_action
from sidecar.store.postgres import partition_ddl as ddl
from sidecar.store.postgres.partitioning import TABLES, rows

QUEUE: Final = "webhook_queue"

# The look for work on a detached table of each partitioned table, as a statement: events
# (live leases, queue entries), attempts (their events' queue entries); nonces hold no work.
_WORK_LOOKS: Final = {
    "webhook_event": "partitioning/busy_detached",
    "webhook_attempt": "partitioning/queued_detached",
    "webhook_nonce": None,
}
_KEYS: Final = {table: column for table, column, _ in TABLES}


def known_parent(table: str) -> bool:
    """Whether ``table`` is one of the store's partitioned tables (a detached table's comment
    names its parent; only these are ever retired)."""
    return table in _KEYS


async def retire_detached(conn: asyncpg.Connection, parent: str, part: str,
                          lower: datetime | None, upper: datetime) -> RetireAction:
    """Drop detached ``part`` of ``parent`` (bounds ``lower`` … ``upper``), or attach it again
    if it holds work; what was done. LEAVE: gone, or a partition again (another run, an
    operator, an older release). Lock waits and the look end in the caller's timeouts."""
    found = await rows(conn, "partitioning/relation", {"part": part})
    if not found:
        return retire_action(exists=False, attached=False, holds_work=False)
    oid, target = found[0]["oid"], ddl.qualified(found[0]["schema"], found[0]["name"])
    await conn.execute(ddl.lock_exclusive(target))
    again = await rows(conn, "partitioning/relation", {"part": part})  # under the lock now
    if not again or again[0]["oid"] != oid:
        return retire_action(exists=False, attached=False, holds_work=False)
    attached: bool = again[0]["attached"]
    holds_work = False
    look = _WORK_LOOKS[parent]
    if not attached and look is not None:
        [[holds_work]] = await rows(conn, look, {"part": oid, "parent": parent})
    action = retire_action(exists=True, attached=attached, holds_work=holds_work)
    parent_name = ddl.quote_ident(parent)
    match action:
        case RetireAction.LEAVE:
            pass
        case RetireAction.ATTACH_AGAIN:
            fence = ddl.quote_ident(found[0]["name"][:40] + "_bound")
            await conn.execute(ddl.attach_again(
                parent=parent_name, part=target, fence=fence,
                key=ddl.quote_ident(_KEYS[parent]), lower=lower, upper=upper))
        case RetireAction.DROP:
            await conn.execute(
                ddl.drop_events(parent=parent_name, part=target, queue=ddl.quote_ident(QUEUE))
                if parent == "webhook_event" else ddl.drop_table(target))
        case _:
            assert_never(action)
    return action
