"""The notices verb (``NoticeStore.claim_notice``) on every store: one message per condition and
interval, whoever claims it. Run on real SQLite, real PostgreSQL (plain and partitioned) and the
in-memory store; the races are real (``asyncio.gather`` over a pool of several connections, and
two stores sharing one database)."""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path

import pytest

from sidecar.core.notices import NoticeKind
from sidecar.core.ports import Store
from sidecar.store.postgres import PostgresStore
from sidecar.store.sqlite import SQLiteStore

HOUR = 3600.0


def _target() -> str:
    """A target id of this test's own: the session database is shared by the module."""
    return "t-" + secrets.token_hex(6)


async def test_first_claim_wins_then_none_within_the_interval(every_store: Store) -> None:
    target = _target()
    assert await every_store.claim_notice(target, NoticeKind.BREAKER_OPENED, "stripe", HOUR)
    assert not await every_store.claim_notice(target, NoticeKind.BREAKER_OPENED, "stripe", HOUR)
    # Each (target, kind, provider) is its own condition.
    assert await every_store.claim_notice(target, NoticeKind.BREAKER_CLOSED, "stripe", HOUR)
    assert await every_store.claim_notice(target, NoticeKind.BREAKER_OPENED, "github", HOUR)
    assert await every_store.claim_notice(_target(), NoticeKind.BREAKER_OPENED, "stripe", HOUR)


async def test_a_claim_older_than_the_interval_is_claimed_again(every_store: Store) -> None:
    target = _target()
    assert await every_store.claim_notice(target, NoticeKind.DEAD_LETTERS, "stripe", HOUR)
    # The last claim is at least 0 s old: with an interval of 0 it is due again, and that
    # claim moves it to now, so an hour's interval refuses the next one.
    assert await every_store.claim_notice(target, NoticeKind.DEAD_LETTERS, "stripe", 0.0)
    assert not await every_store.claim_notice(target, NoticeKind.DEAD_LETTERS, "stripe", HOUR)


async def test_concurrent_claims_of_one_key_one_wins(every_store: Store) -> None:
    for _ in range(5):
        target = _target()
        won = await asyncio.gather(*(
            every_store.claim_notice(target, NoticeKind.SIGNATURE_FAILURES, "stripe", HOUR)
            for _ in range(16)))
        assert won.count(True) == 1


@pytest.mark.postgres
async def test_two_pools_on_one_database_one_wins(pg_dsn: str) -> None:
    stores = [await PostgresStore.connect(pg_dsn, min_size=4, max_size=4) for _ in range(2)]
    try:
        for _ in range(5):
            target = _target()
            won = await asyncio.gather(*(
                store.claim_notice(target, NoticeKind.PAUSED, "stripe", HOUR)
                for _ in range(8) for store in stores))
            assert won.count(True) == 1
    finally:
        for store in stores:
            await store.close()


async def test_two_sqlite_stores_on_one_file_one_wins(tmp_path: Path) -> None:
    stores = [await SQLiteStore.open(tmp_path / "events.db") for _ in range(2)]
    try:
        target = _target()
        won = await asyncio.gather(*(
            store.claim_notice(target, NoticeKind.PAUSED, "stripe", HOUR)
            for _ in range(8) for store in stores))
        assert won.count(True) == 1
    finally:
        for store in stores:
            await store.close()
