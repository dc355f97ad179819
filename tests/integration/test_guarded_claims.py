"""The replay guard's bind folded into the claim (``DeliveryStore.claim_guarded``, issue 22): a
new GitHub event costs the claim and the record, not a bind besides. Held to the answers a
bind alone and then the claim gave, on every store (``every_store``: SQLite, PostgreSQL, the
memory store), row by row of the truth table in ``sidecar/delivery/steps.py``:

    guard bound …      claim finds …                      answer
    not yet            no row                             won, the guard bound to these ids
    not yet            a row (each state)                 lost, that row; the guard bound
    to these ids       no row / a row                     won / lost; the binding unmoved
    to other ids       no row / a row (each state)        Replayed: no row made, nothing won

then concurrent copies (one body under many ids: exactly one binds and claims; a body's own
redeliveries: one wins, every copy keeps the binding), and on PostgreSQL the races of the one
statement: copies across two pools, a competing bind that commits after the statement's
snapshot, a guarded claim whose answer was lost with its connection, and the commits a new
GitHub event costs through the pipeline (2, where a bind alone made it 3).

Guard keys carry a random suffix: the session database's nonce table is shared with other
suites. Nothing sleeps to synchronise: waits are bounded polls on a condition.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import hmac
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from sidecar.config.loader import parse_config
from sidecar.core.answers import Result
from sidecar.core.bodyreplay import guard_key, ids_digest
from sidecar.core.events import (
    AttemptResult,
    Claim,
    EventState,
    Guard,
    Outcome,
    RecordedResponse,
    Replayed,
    StoredRequest,
)
from sidecar.core.ports import Store
from sidecar.runtime.testing import FakeUpstream, inbound, pipeline_for
from sidecar.store.postgres import PostgresStore
from tests.integration.test_coalesced_writes import (
    _commits_of,
    _waiting_backends,
    fresh_database,
    until,
)
from tests.pgserver import ThrowawayCluster, migrated_database
from tests.replyeater import ReplyEater
from tests.support import GITHUB_SECRET, base_config

PROVIDER = "github"
LEASE = 30.0
DONE = AttemptResult(EventState.DONE, Outcome.RESPONSE, RecordedResponse(200, (), b"ok"), 1.0)
FAILED = AttemptResult(EventState.FAILED, Outcome.RESPONSE, RecordedResponse(500, (), b""), 1.0)
STATES = ("processing", "failed", "done", "queued")


def _b(text: str) -> bytes:
    """A body of its own: the guard's key is the body's hash, and the nonce table is shared."""
    return f"{text} {secrets.token_hex(6)}".encode()


def _guard(body: bytes, *event_ids: str) -> Guard:
    """The replay guard of ``body`` (its hash) delivered under ``event_ids``."""
    return Guard(guard_key(hashlib.sha256(body).digest()), ids_digest(list(event_ids)))


def _fresh(prefix: str = "d") -> str:
    return f"{prefix}-{secrets.token_hex(6)}"


async def _claim(store: Store, event_id: str, guard: Guard, body: bytes = b"b"
                 ) -> Claim | Replayed:
    return await store.claim_guarded(PROVIDER, event_id, hashlib.sha256(body).digest(), LEASE,
                                     "p", guard)


async def _row_in(store: Store, state: str, event_id: str, body: bytes) -> None:
    """An event row in ``state``, written by the verbs that lead there (unguarded)."""
    digest = hashlib.sha256(body).digest()
    if state == "queued":
        enqueued = await store.enqueue(PROVIDER, event_id, digest,
                                       StoredRequest("POST", "/", (), body))
        assert enqueued.accepted
        return
    claim = await store.claim(PROVIDER, event_id, digest, LEASE, "first")
    assert claim.won
    if state != "processing":
        assert await store.complete(PROVIDER, event_id, 1, DONE if state == "done" else FAILED)


# == the truth table, every store ==============================================================


async def test_a_new_guard_and_no_row_wins_and_binds(every_store: Store) -> None:
    store, event_id = every_store, _fresh()
    guard = _guard(_b("new body"), event_id)
    claim = await _claim(store, event_id, guard)
    assert isinstance(claim, Claim) and claim.won
    assert claim.binding is not None and claim.binding.digest == guard.digest
    assert claim.binding.now - claim.binding.received_at < 5.0  # bound just now
    assert claim.row.state is EventState.PROCESSING and claim.row.attempt == 1
    # The binding is the one a bind alone would have made and answers later binds.
    assert (await store.bind_nonce(PROVIDER, guard.key, b"x" * 32)).digest == guard.digest


@pytest.mark.parametrize("state", STATES)
async def test_a_new_guard_and_an_existing_row_loses_and_still_binds(
        every_store: Store, state: str) -> None:
    store, event_id = every_store, _fresh()
    await _row_in(store, state, event_id, _b("first body"))
    row = await store.get(PROVIDER, event_id)
    # The same id with another body (a payload mismatch, or a guard purged before its row).
    other = _b("another body")
    guard = _guard(other, event_id)
    claim = await _claim(store, event_id, guard, other)
    assert isinstance(claim, Claim) and not claim.won
    assert row is not None and claim.row.state is row.state and claim.row.attempt == row.attempt
    assert claim.row.body_sha256 == row.body_sha256 and claim.row.in_queue == row.in_queue
    assert claim.binding is not None and claim.binding.digest == guard.digest
    assert (await store.bind_nonce(PROVIDER, guard.key, b"x" * 32)).digest == guard.digest


async def test_a_guard_bound_to_these_ids_claims_as_unguarded_and_keeps_its_time(
        every_store: Store) -> None:
    store, event_id = every_store, _fresh()
    guard = _guard(_b("bound body"), event_id)
    bound = await store.bind_nonce(PROVIDER, guard.key, guard.digest)  # a queue-mode bind, say
    claim = await _claim(store, event_id, guard)
    assert isinstance(claim, Claim) and claim.won
    assert claim.binding is not None
    assert (claim.binding.digest, claim.binding.received_at) == (bound.digest, bound.received_at)
    again = await _claim(store, event_id, guard)  # the provider's own redelivery
    assert isinstance(again, Claim) and not again.won and again.row.attempt == 1
    assert again.binding is not None and again.binding.received_at == bound.received_at


@pytest.mark.parametrize("state", [None, *STATES])
async def test_a_guard_bound_to_other_ids_is_replayed_and_writes_nothing(
        every_store: Store, state: str | None) -> None:
    store, first, fresh = every_store, _fresh("first"), _fresh("fresh")
    body = _b("captured body")
    original = _guard(body, first)
    assert isinstance(await _claim(store, first, original, body), Claim)
    if state is not None:  # the fresh id already has a row, with some other body
        await _row_in(store, state, fresh, _b("fresh's own body"))
    before = await store.get(PROVIDER, fresh)
    replay = await _claim(store, fresh, _guard(body, fresh), body)
    assert isinstance(replay, Replayed)
    assert replay.binding.digest == original.digest
    # Nothing of the event was written: no row made, an existing one untouched.
    after = await store.get(PROVIDER, fresh)
    if before is None:
        assert after is None
    else:
        assert after is not None and dataclasses.replace(before, now=after.now) == after


async def test_an_unguarded_claim_answers_no_binding(every_store: Store) -> None:
    claim = await every_store.claim(PROVIDER, _fresh(), b"h" * 32, LEASE, "p")
    assert claim.won and claim.binding is None


# == concurrent copies, every store ============================================================


async def test_copies_of_one_body_under_many_ids_bind_and_claim_once(
        every_store: Store) -> None:
    """Real concurrency on the SQL stores (their claims go out together in one batch)."""
    store, body = every_store, f"body {secrets.token_hex(4)}".encode()
    ids = [_fresh("copy") for _ in range(12)]
    answers = await asyncio.gather(*(_claim(store, i, _guard(body, i), body) for i in ids))
    won = [i for i, a in zip(ids, answers, strict=True) if isinstance(a, Claim) and a.won]
    assert len(won) == 1
    replayed = [a for a in answers if isinstance(a, Replayed)]
    assert len(replayed) == 11
    assert {a.binding.digest for a in replayed} == {ids_digest(won)}
    assert [i for i in ids if await store.get(PROVIDER, i) is not None] == won


async def test_redeliveries_of_one_body_at_once_all_keep_the_binding(every_store: Store) -> None:
    store, event_id, body = every_store, _fresh(), _b("redelivered")
    guard = _guard(body, event_id)
    answers = await asyncio.gather(*(_claim(store, event_id, guard, body) for _ in range(8)))
    assert all(isinstance(a, Claim) for a in answers)
    claims = [a for a in answers if isinstance(a, Claim)]
    assert sum(c.won for c in claims) == 1
    assert {c.binding.digest for c in claims if c.binding is not None} == {guard.digest}
    assert all(c.binding is not None for c in claims)


# == PostgreSQL: real concurrency across pools, the statement's races ===========================


@pytest.mark.postgres
async def test_copies_across_two_pools_bind_and_claim_once(
        pg_store: PostgresStore, pg_dsn: str) -> None:
    other = await PostgresStore.connect(pg_dsn, min_size=2, max_size=8)
    try:
        for _ in range(3):  # a few rounds: the winner may come from either pool
            body = f"body {secrets.token_hex(4)}".encode()
            ids = [_fresh("copy") for _ in range(20)]
            answers = await asyncio.gather(*(
                _claim((pg_store, other)[n % 2], i, _guard(body, i), body)
                for n, i in enumerate(ids)))
            won = [i for i, a in zip(ids, answers, strict=True)
                   if isinstance(a, Claim) and a.won]
            assert len(won) == 1, answers
            assert sum(isinstance(a, Replayed) for a in answers) == 19
            conn = await asyncpg.connect(pg_dsn)
            try:
                rows = await conn.fetch("SELECT event_id FROM webhook_event"
                                        " WHERE provider = $1 AND event_id = any($2::text[])",
                                        PROVIDER, ids)
                nonce = await conn.fetchval(
                    "SELECT body_sha256 FROM webhook_nonce WHERE provider = $1 AND nonce = $2",
                    PROVIDER, _guard(body).key)
            finally:
                await conn.close()
            assert [r["event_id"] for r in rows] == won
            assert bytes(nonce) == ids_digest(won)
        assert pg_store._claims.batches + other._claims.batches >= 1, "batches were raced too"
    finally:
        await other.close()


_HOLD_NONCE = ("INSERT INTO webhook_nonce (provider, nonce, body_sha256, received_at)"
               " VALUES ($1, $2, $3, now())")


@pytest.mark.postgres
@pytest.mark.parametrize("holder_binds", ["other ids", "these ids", "other ids, and a row"])
async def test_a_bind_committed_after_the_snapshot_is_read_by_a_second_statement(
        pg_store: PostgresStore, pg_dsn: str, holder_binds: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Another session binds the guard and commits while the claim's bind waits for it: the
    statement cannot see whose digest holds, inserts no row, and the claim runs again."""
    event_id, body = _fresh(), f"held {secrets.token_hex(4)}".encode()
    guard = _guard(body, event_id)
    held = guard.digest if holder_binds == "these ids" else ids_digest(["someone else"])
    if holder_binds.endswith("a row"):  # the id has a row already: read as lost, it would
        await _row_in(pg_store, "done", event_id, _b("the id's first body"))  # answer a replay
    sent: list[str] = []
    real = pg_store._calls._run

    async def run(name: str, *args: Any) -> Any:
        sent.append(name)
        return await real(name, *args)

    monkeypatch.setattr(pg_store._calls, "_run", run)
    holder = await asyncpg.connect(pg_dsn)
    watcher = await asyncpg.connect(pg_dsn)
    try:
        await holder.execute("BEGIN")
        await holder.execute(_HOLD_NONCE, PROVIDER, guard.key, held)
        claim = asyncio.create_task(_claim(pg_store, event_id, guard, body))

        async def waits() -> bool:
            return await _waiting_backends(watcher) == 1

        await until(waits, "the guarded claim waits for the holder's bind")
        await holder.execute("COMMIT")
        answer = await claim
    finally:
        holder.terminate()
        watcher.terminate()
    assert sent == ["claim", "claim"], "run again, never read as lost"
    if holder_binds == "these ids":
        assert isinstance(answer, Claim) and answer.won
    else:
        assert isinstance(answer, Replayed) and answer.binding.digest == held
        row = await pg_store.get(PROVIDER, event_id)
        assert (row is None) == (holder_binds == "other ids")


@pytest.fixture
async def private_dsn(cluster: ThrowawayCluster) -> AsyncIterator[str]:
    async with migrated_database(cluster, "guarded") as url:
        yield url


@pytest.mark.postgres
async def test_a_guarded_claim_whose_answer_was_lost_is_recognised_as_won(
        private_dsn: str, eater: ReplyEater) -> None:
    event_id, body = _fresh(), _b("lost answer")
    guard = _guard(body, event_id)
    async with contextlib.AsyncExitStack() as stack:
        store = await PostgresStore.connect(eater.relayed(private_dsn), min_size=1, max_size=2,
                                            statement_cache_size=0)
        stack.push_async_callback(store.close)
        eater.arm(b"INSERT INTO webhook_nonce")  # the guarded claim's statement
        claim = await _claim(store, event_id, guard, body)
        assert eater.fired.is_set(), "the claim committed and its answer was swallowed"
        # claim_landed.sql found the row leased to this very call, and the binding with it.
        assert isinstance(claim, Claim) and claim.won
        assert claim.binding is not None and claim.binding.digest == guard.digest
        replay = await _claim(store, _fresh(), _guard(body, "elsewhere"), body)
        assert isinstance(replay, Replayed)


# == the commits of one new GitHub event =======================================================


def _github(body: bytes, delivery: str) -> dict[str, str]:
    signature = "sha256=" + hmac.new(GITHUB_SECRET.encode(), body, hashlib.sha256).hexdigest()
    return {"X-Hub-Signature-256": signature, "X-GitHub-Delivery": delivery,
            "X-GitHub-Event": "push", "Content-Type": "application/json"}


@pytest.mark.postgres
async def test_a_lone_new_github_event_commits_twice(
        pg_database_factory: Callable[[], Awaitable[str]]) -> None:
    """Claim (with the guard's bind in it) and record: 2 commits a new event, where the bind
    alone before the claim made 3. Counted by PostgreSQL on the test's own database, as the
    difference between delivering 1 and 11 events one at a time (the pool's own commits are
    the same in both)."""
    conf = parse_config(base_config("http://127.0.0.1:9", "sqlite:///unused.db"), env={})
    github = conf.provider("github")
    assert github is not None and github.guards_body_replay

    def deliveries(count: int) -> Callable[[PostgresStore], Awaitable[None]]:
        async def work(store: PostgresStore) -> None:
            pipeline = pipeline_for(conf, store=store, upstream=FakeUpstream())
            for _ in range(count):
                delivery = _fresh("gh")
                body = b'{"delivery": "%s"}' % delivery.encode()
                answer = await pipeline.deliver(github, inbound(body, _github(body, delivery)))
                assert answer.result is Result.NEW, answer
        return work

    async with fresh_database(pg_database_factory) as dsn:
        one, _ = await _commits_of(dsn, deliveries(1), write_batch=64)
        eleven, _ = await _commits_of(dsn, deliveries(11), write_batch=64)
    assert (eleven - one) / 10 == 2, (one, eleven)
