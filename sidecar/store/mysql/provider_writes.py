"""The provider verbs of more than one statement: delivery limits (tokens, permits), holds
(pause, circuit breaker) and notices."""

from __future__ import annotations

from sidecar.store.mysql.tx import Duplicate, Row, Step, Tx, exists
from sidecar.store.rows import Params

# take_tokens, pause_provider and breaker_failure insert a row that may exist (1062) before a
# guarded UPDATE of it. That insert runs autocommitted: a failed insert holds a shared lock on
# the existing row until its transaction ends, and two transactions that each hold one and
# then want the row exclusively for their UPDATE deadlock. Autocommitted, the shared lock ends
# with the statement. (A claim's or a bind's failed insert is followed by reads only.)


async def take_tokens(tx: Tx, params: Params) -> list[Row]:
    await exists(tx, "rate_row", params)
    async with tx.transaction():
        await tx.count("take_tokens", params)
        return await tx.rows("tokens_read", params)


async def return_tokens(tx: Tx, params: Params) -> list[Row]:
    await tx.count("return_tokens", params)
    return []


async def take_permits(tx: Tx, params: Params) -> list[Row]:
    """Slot by slot, lowest first, each taken by one statement (new, or its lease ended)."""
    taken: list[Row] = []
    want = int(str(params["want"]))
    for slot in range(1, int(str(params["concurrency"])) + 1):
        if len(taken) >= want:
            break
        one = {**params, "slot": slot}
        try:
            got = await tx.insert("take_permit", one)
        except Duplicate:
            got = await tx.count("take_permit_again", one)
        if got:
            taken.append({"slot": slot})
    return taken


async def release_permits(tx: Tx, params: Params) -> list[Row]:
    return [{"slot": None}] * await tx.count("release_permits", params)


async def claim_notice(tx: Tx, params: Params) -> list[Row]:
    try:
        await tx.insert("claim_notice", params)
    except Duplicate:
        if not await tx.count("claim_notice_again", params):
            return []
    return [{"claimed": 1}]


async def pause_provider(tx: Tx, params: Params) -> list[Row]:
    await exists(tx, "provider_row", params)
    async with tx.transaction():
        if not await tx.count("pause_provider", params):
            return []
        return await tx.rows("provider_state", params)


async def breaker_failure(tx: Tx, params: Params) -> list[Row]:
    if not await exists(tx, "breaker_first", params):
        return await tx.rows("provider_state", params)
    async with tx.transaction():
        if not await tx.count("breaker_failure", params):
            return []
        return await tx.rows("provider_state", params)


def guarded_state(name: str) -> Step:
    async def step(tx: Tx, params: Params) -> list[Row]:
        if not await tx.count(name, params):
            return []
        return await tx.rows("provider_state", params)
    return step
