"""The MySQL store on a three-node Galera cluster (Debian's galera-4 with mariadbd, started by
this module on free loopback ports, ``tests/galeraserver.py``), with real processes: proxies
each connected to a different node, the same events delivered to all of them at once; a claim
that loses a certification; ``migrate`` run against two nodes at once; ordered queue takes from
two nodes; a node SIGKILLed under load. Nothing is lost, nothing reaches the app twice."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from sidecar.core.events import (
    AttemptResult,
    Claim,
    EventState,
    Outcome,
    RecordedResponse,
    Settlement,
    StoredRequest,
)
from sidecar.store.mysql import MySQLStore, queue_writes
from sidecar.store.mysql.event_writes import claim as claim_step
from sidecar.store.mysql.tx import Row, Tx
from sidecar.store.rows import Params
from tests.acceptance.conftest import run_cli
from tests.galeraserver import Cluster, certification_failures, query
from tests.mariadbserver import create_database, drop_database, unique_database_name, with_database
from tests.support import (
    ProxyProcess,
    StubApp,
    base_config,
    post,
    stripe_event,
    stripe_headers,
    write_config,
)

pytestmark = [pytest.mark.mariadb, pytest.mark.galera]

STRIPE = "/webhooks/stripe"
NODES = range(3)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """Three nodes of this module's own (a test SIGKILLs one)."""
    nodes = Cluster()
    try:
        nodes.start()
        yield nodes
    finally:
        nodes.cleanup()


@pytest.fixture(autouse=True)
def whole_cluster(cluster: Cluster) -> Iterator[None]:
    """Each test starts with three nodes (one killed, or dead, is started again); a node
    that exits by itself fails the test that saw it, with its log."""
    cluster.heal()
    yield
    assert cluster.died() == []


@pytest.fixture
async def database(cluster: Cluster) -> AsyncIterator[str]:
    """A database made on node 0 (the DDL reaches every node); its name."""
    name = unique_database_name("sidecar_galera")
    await create_database(cluster.dsn(0), name)
    try:
        yield name
    finally:
        await drop_database(cluster.dsn(0), name)  # node 0 is never the one killed


@pytest.fixture
async def closing() -> AsyncIterator[list[MySQLStore]]:
    """The stores a test opened, closed after it, also when it failed halfway."""
    opened: list[MySQLStore] = []
    yield opened
    for store in opened:
        await store.close()


async def connect(urls: list[str], closing: list[MySQLStore]) -> list[MySQLStore]:
    for url in urls:  # each registered as soon as it is open
        closing.append(await MySQLStore.connect(url))
    return closing[-len(urls):]


@pytest.fixture
async def stub() -> AsyncIterator[StubApp]:
    app = await StubApp().start()
    try:
        yield app
    finally:
        await app.stop()


async def states(dsn: str) -> dict[str, str]:
    """event id → state, as one node has it."""
    return {r[0].decode(): r[1] for r in await query(dsn, "SELECT event_id, state"
                                                          " FROM webhook_event")}


async def proxies(tmp_path: Path, cluster: Cluster, name: str, stub: StubApp,
                  nodes: range | list[int] = NODES, **provider: Any) -> list[ProxyProcess]:
    """Migrated through node 0, then one ``run`` process per node, each on its node."""
    configs = []
    for node in nodes:
        config = base_config(stub.url, with_database(cluster.dsn(node), name))
        config["store"].update({"url": with_database(cluster.dsn(node), name)
                                + "?connect_timeout=1", "statement_timeout": "5s"})
        config["providers"]["stripe"].update(provider)
        configs.append(write_config(tmp_path, config, f"node{node}.yaml"))
    code, _, err = await run_cli("migrate", "--config", str(configs[0]))
    assert code == 0, err
    return list(await asyncio.gather(*(ProxyProcess(path).start() for path in configs)))


async def stop(procs: list[ProxyProcess]) -> None:
    for proc in (p for p in procs if p.proc is not None and p.proc.returncode is None):
        await proc.terminate()


Answer = tuple[int, dict[str, str], bytes]


def answered_consistently(stub: StubApp, answers: list[tuple[str, Answer]]) -> None:
    """Each answer is the app's answer to that event's forward (2xx), or retryable with a
    Retry-After: never a 2xx the app did not give."""
    for event_id, (status, headers, body) in answers:
        assert status in (200, 409, 503), (event_id, status, body)
        if status == 200:
            attempt = json.loads(body)["attempt"]
            assert json.loads(body) == {"ok": True, "event": event_id, "attempt": attempt}
            assert attempt in stub.attempts(event_id), (event_id, attempt)
        else:
            assert headers["Retry-After"], (event_id, status, headers)


async def until_answered(deliver: Callable[[str], Awaitable[tuple[str, Answer]]],
                         stub: StubApp, event_ids: Iterable[str]) -> None:
    """As a provider retries: each event sent again, every 0.2 s, until answered 2xx (each
    answer checked), all events at once; bounded."""
    async def one(event_id: str) -> None:
        for _ in range(100):
            answer = await deliver(event_id)
            answered_consistently(stub, [answer])
            if answer[1][0] == 200:
                return
            await asyncio.sleep(0.2)  # the provider's retry interval
        pytest.fail(f"{event_id} never answered 200")

    await asyncio.gather(*(one(e) for e in event_ids))


async def test_the_same_events_through_three_nodes_reach_the_app_once_each(
    cluster: Cluster, database: str, stub: StubApp, tmp_path: Path,
) -> None:
    procs = await proxies(tmp_path, cluster, database, stub)
    for proc in procs:  # each found its node a member of a three-node cluster
        found = await proc.wait_for_log("store_server")
        assert found["server"] == "Galera cluster of 3 nodes", found
    ids = [f"evt_g_{i}" for i in range(50)]
    before = sum([await certification_failures(cluster.dsn(n)) for n in NODES])
    try:
        async with aiohttp.ClientSession() as client:
            async def deliver(event_id: str, node: int) -> tuple[str, Answer]:
                body = stripe_event(event_id)
                return event_id, await post(client, procs[node].url + STRIPE, body,
                                            stripe_headers(body))

            # Each event to the three proxies at once (each copy signed on its own).
            answers = await asyncio.gather(*(deliver(e, n) for e in ids for n in NODES))
            answered_consistently(stub, answers)
            assert max(stub.count(e) for e in ids) == 1
            # The provider retries what was not answered 2xx: each ends answered, none resent.
            late = {e for e, (status, _, _) in answers if status != 200}
            await until_answered(lambda e: deliver(e, ids.index(e) % 3), stub, late)
        assert {e: stub.count(e) for e in ids} == {e: 1 for e in ids}
        for node in NODES:  # every node has every row, done
            assert await states(with_database(cluster.dsn(node), database)) == {
                e: "done" for e in ids}
        # The same ids through three nodes at once: some commits lost their certification.
        after = sum([await certification_failures(cluster.dsn(n)) for n in NODES])
        assert after > before
    finally:
        await stop(procs)


async def test_a_claim_that_loses_the_certification_reads_as_a_lost_claim(
    cluster: Cluster, database: str, tmp_path: Path, closing: list[MySQLStore],
) -> None:
    """Node 1's claim has inserted the row, uncommitted, when node 0's claim of the same id
    commits: node 1's commit fails (1213), the store runs the claim again, and it finds node
    0's row: a lost claim, not an error."""
    urls = [with_database(cluster.dsn(n), database) for n in (0, 1)]
    code, _, err = await run_cli_migrate(urls[0], tmp_path)
    assert code == 0, err
    first, second = await connect(urls, closing)
    inserted, go_on = asyncio.Event(), asyncio.Event()
    runs = 0

    async def held_claim(tx: Tx, params: Params) -> Any:
        nonlocal runs
        runs += 1
        claim = await claim_step(tx, params)
        if runs == 1:  # the first run waits before its commit, its row inserted
            inserted.set()
            await go_on.wait()
        return claim

    second._claims = second._coalescer("claim", held_claim, 1)
    before = await certification_failures(cluster.dsn(1))
    try:
        assert second.cluster.galera and second.cluster.size == 3
        losing = asyncio.create_task(second.claim("stripe", "evt_cert", b"b" * 32, 30.0, "B"))
        await asyncio.wait_for(inserted.wait(), 10)
        won = await first.claim("stripe", "evt_cert", b"a" * 32, 30.0, "A")
        assert isinstance(won, Claim) and won.won
        go_on.set()
        lost = await asyncio.wait_for(losing, 10)
        assert isinstance(lost, Claim) and not lost.won
        assert lost.row.body_sha256 == b"a" * 32  # node 0's row
        assert runs == 2  # rolled back once by the certification, then lost
        assert await certification_failures(cluster.dsn(1)) > before
    finally:
        go_on.set()


async def run_cli_migrate(url: str, tmp: Path) -> tuple[int, str, str]:
    """``migrate`` through the node of ``url``."""
    path = write_config(tmp, base_config("http://127.0.0.1:9", url),
                        f"migrate-{url.rsplit(':', 1)[1].replace('/', '-')}.yaml")
    return await run_cli("migrate", "--config", str(path))


async def test_migrate_against_two_nodes_at_once_applies_each_migration_once(
    cluster: Cluster, database: str, tmp_path: Path,
) -> None:
    urls = [with_database(cluster.dsn(n), database) for n in (0, 1)]
    results = await asyncio.gather(*(run_cli_migrate(url, tmp_path) for url in urls))
    for code, _, err in results:
        assert code == 0, err
    applied = [line for _, out, _ in results for line in out.splitlines()
               if line.startswith("applied:")]
    names = [n.strip() for line in applied for n in line.removeprefix("applied:").split(",")]
    assert sorted(names) == ["0001_init", "0002_take_lock"], results
    for node in NODES:  # the same schema on every node, recorded once, no lease left
        url = with_database(cluster.dsn(node), database)
        recorded = await query(url, "SELECT name FROM webhook_sidecar_migrations ORDER BY name")
        assert [r[0] for r in recorded] == ["0001_init", "0002_take_lock"]
        assert await query(url, "SELECT name FROM webhook_sidecar_lock") == []
        tables = await query(url, "SHOW TABLES")
        assert len(tables) == 11, tables


async def test_an_ordered_take_on_another_node_is_run_again_after_this_ones(
    cluster: Cluster, database: str, tmp_path: Path, closing: list[MySQLStore],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The cross-node case a named lock would miss: A is dead, B (later, same key) waits. Node
    1's take has picked B, uncommitted, when A is requeued and node 0's take picks A (node 0
    sees nothing of node 1's take). Both wrote the provider's take-lock row: node 1's commit
    fails certification, its take runs again, sees A in flight, and takes nothing. Without
    the row both would commit, and A and B would be at the app at once."""
    urls = [with_database(cluster.dsn(n), database) for n in (0, 1)]
    code, _, err = await run_cli_migrate(urls[0], tmp_path)
    assert code == 0, err
    here, there = await connect(urls, closing)
    picked, go_on = asyncio.Event(), asyncio.Event()
    runs_there = 0
    take = queue_writes.take_queued_under_lock_row

    async def held_take(tx: Tx, params: Params) -> list[Row]:
        nonlocal runs_there
        taken = await take(tx, params)
        if str(params["owner"]).startswith("there"):
            runs_there += 1
            if runs_there == 1:  # the first run waits before its commit, B picked
                picked.set()
                await go_on.wait()
        return taken

    monkeypatch.setattr(queue_writes, "take_queued_under_lock_row", held_take)
    request = StoredRequest(method="POST", path="/x", headers=(), body=b"{}")
    dead = Settlement(EventState.DEAD, AttemptResult(EventState.DEAD, Outcome.RESPONSE,
                                                     RecordedResponse(500, (), b""), 1.0))
    try:
        for event_id in ("A", "B"):
            assert (await here.enqueue("stripe", event_id, b"h" * 32, request,
                                       order_key="k")).accepted
        (first,) = await here.take_queued("stripe", 10, 30.0, "here", ordered=True)
        assert first.event_id == "A"
        assert await here.settle_queued("stripe", "A", first.tries, dead)
        theirs = asyncio.create_task(there.take_queued("stripe", 10, 30.0, "there",
                                                       ordered=True))
        await asyncio.wait_for(picked.wait(), 10)
        assert await here.requeue_dead("stripe", "A") == ["A"]
        assert [w.event_id for w in await here.take_queued("stripe", 10, 30.0, "here",
                                                           ordered=True)] == ["A"]
        go_on.set()
        assert await asyncio.wait_for(theirs, 10) == []  # B waits behind A in flight
        assert runs_there == 2
        row = await here.get("stripe", "B")
        assert row is not None and row.state is EventState.QUEUED
    finally:
        go_on.set()


async def test_ordered_takes_from_two_nodes_keep_each_keys_order(
    cluster: Cluster, database: str, tmp_path: Path,
) -> None:
    app = await StubApp().start()
    procs: list[ProxyProcess] = []
    try:
        queue = {"first_retry": "200ms", "max_retry_delay": "1s", "poll_interval": "50ms",
                 "order_key": "$.data.object.id"}
        procs = await proxies(tmp_path, cluster, database, app, nodes=[0, 1], mode="queue",
                              queue=queue)
        keys, per_key = ("cus_a", "cus_b"), 3
        sent: dict[str, list[str]] = {k: [] for k in keys}
        async with aiohttp.ClientSession() as client:
            async def send_key(key: str) -> None:
                for n in range(per_key):  # one after another, through alternating nodes
                    event_id = f"evt_{key}_{n}"
                    body = stripe_event(event_id, data={"object": {"id": key, "n": n}})
                    status, _, _ = await post(client, procs[n % 2].url + STRIPE, body,
                                              stripe_headers(body))
                    assert status == 200
                    sent[key].append(event_id)

            await asyncio.gather(*(send_key(k) for k in keys))
        await app.wait_for(lambda: app.count() >= len(keys) * per_key, timeout=30,
                           what="every event at the app")
        for key in keys:
            got = [s.event_id for s in sorted(app.seen, key=lambda s: s.at)
                   if s.event_id.startswith(f"evt_{key}_")]
            assert got == sent[key], key  # in order, each once
    finally:
        await stop(procs)
        await app.stop()


async def test_a_node_killed_mid_load_loses_nothing_and_forwards_nothing_twice(
    cluster: Cluster, database: str, stub: StubApp, tmp_path: Path,
) -> None:
    """Node 2 is SIGKILLed while events pour in through all three proxies. The proxies on
    nodes 0 and 1 go on; node 2's answers 503 with Retry-After while its node is down. Every
    event answered 2xx reached the app; none reached it twice but for a take-over of an
    attempt whose result was never recorded; the provider's retries through the other proxies
    complete the rest."""
    # The lease outlasts the cluster's stall while it drops node 2 (failure detection, about
    # 4 s here): a commit held that long must not find its lease ended (docs/design.md).
    procs = await proxies(tmp_path, cluster, database, stub, lease="8s")
    ids = [f"evt_k_{i}" for i in range(60)]
    answers: list[tuple[str, Answer]] = []
    try:
        async with aiohttp.ClientSession() as client:
            async def deliver(event_id: str, node: int) -> tuple[str, Answer]:
                body = stripe_event(event_id)
                try:
                    answer = await post(client, procs[node].url + STRIPE, body,
                                        stripe_headers(body))
                except aiohttp.ClientError:
                    answer = (0, {}, b"")  # the proxy's connection cut: nothing was said
                return event_id, answer

            async def load() -> None:
                for batch in range(0, len(ids), 10):
                    answers.extend(await asyncio.gather(*(
                        deliver(e, n) for e in ids[batch:batch + 10] for n in NODES)))

            loading = asyncio.create_task(load())
            await stub.wait_for(lambda: stub.count() >= 15, timeout=30,
                                what="a quarter of the events at the app")
            await asyncio.to_thread(cluster.kill, 2)
            await loading
            answered_consistently(stub, [a for a in answers if a[1][0] != 0])
            # While node 2 is down its proxy answers 503, Retry-After.
            status, headers, _ = (await deliver("evt_k_probe", 2))[1]
            assert status == 503 and headers["Retry-After"], (status, headers)
            # The provider retries through the live proxies until every event is answered.
            done = {e for e, (status, _, _) in answers if status == 200}
            await until_answered(lambda e: deliver(e, ids.index(e) % 2), stub,
                                 set(ids) - done)
        # Nothing lost; nothing forwarded twice, but for an attempt in flight through node 2
        # when it died: its result never recorded, it is taken over once its lease ends.
        for event_id in ids:
            assert stub.attempts(event_id) in ([1], [1, 2], [2]), (
                event_id, stub.attempts(event_id))
        for node in (0, 1):
            assert await states(with_database(cluster.dsn(node), database)) == {
                e: "done" for e in ids}
    finally:
        await stop(procs)
