"""The notifier in this process against a real target on loopback (every message checked with
the official ``standardwebhooks`` package) and real stores: the message and its headers,
retries with one webhook-id, refusals, Slack's shape, the events filter, a full queue, the
interval across two stores sharing one database, and a bounded close while a target hangs."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path

import pytest

from sidecar.config.loader import parse_config
from sidecar.config.model import Config
from sidecar.core.notices import NoNotices, Notice, NoticeKind
from sidecar.core.ports import NoticeStore, Store
from sidecar.obs.metrics import Metrics
from sidecar.ops.notify import Notifier
from sidecar.runtime.wiring import open_notices
from sidecar.store.postgres import PostgresStore
from tests.notify_receiver import SECRET, Receiver
from tests.support import STRIPE_SECRET, until

NOTICE = Notice(NoticeKind.BREAKER_OPENED, "stripe", {"failures": 10, "window": "1m"})


def config_for(*targets: dict[str, object], **notify: object) -> Config:
    return parse_config({
        "upstream": {"url": "http://127.0.0.1:9"},
        "providers": {"stripe": {"path": "/webhooks/stripe", "preset": "stripe",
                                 "secrets": [STRIPE_SECRET]}},
        "notify": {"targets": list(targets), **notify},
    }, env={}, base_dir=Path.cwd())


def standard(receiver: Receiver, **more: object) -> dict[str, object]:
    return {"url": receiver.url, "secret": SECRET, **more}


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    target = await Receiver().start()
    try:
        yield target
    finally:
        await target.stop()


def count(metrics: Metrics, kind: str, result: str) -> float:
    return metrics.notifications.labels(kind, result)._value.get()


async def started(config: Config, store: NoticeStore | None, metrics: Metrics) -> Notifier:
    notifier = Notifier(config.notify, store, metrics)
    notifier.start()
    return notifier


async def test_a_notice_arrives_signed_in_the_standard_webhooks_format(
        store: Store, receiver: Receiver) -> None:
    metrics = Metrics()
    before = time.time()
    notifier = await started(config_for(standard(receiver)), store, metrics)
    try:
        notifier.notice(NOTICE)
        await receiver.wait_for(1)
    finally:
        await notifier.close(5.0)
    [got] = receiver.received
    assert got.verified, "the standardwebhooks package verifies it"
    assert got.headers["content-type"] == "application/json"
    assert got.message_id.startswith("msg_")
    assert before - 1 <= int(got.headers["webhook-timestamp"]) <= time.time() + 1
    assert got.json["type"] == "breaker.opened"
    assert got.json["data"] == {"provider": "stripe", "failures": 10, "window": "1m"}
    assert got.json["timestamp"].endswith("Z")
    assert count(metrics, "breaker.opened", "sent") == 1


async def test_a_failing_target_gets_the_message_again_with_the_same_id(
        memory_store: Store, receiver: Receiver) -> None:
    receiver.statuses = [503, 500, 429]
    metrics = Metrics()
    notifier = await started(config_for(standard(receiver)), memory_store, metrics)
    try:
        notifier.notice(NOTICE)
        await receiver.wait_for(1)
    finally:
        await notifier.close(5.0)
    assert [r.status for r in receiver.received] == [503, 500, 429, 200]
    assert len({r.message_id for r in receiver.received}) == 1
    assert len({r.body for r in receiver.received}) == 1
    assert all(r.verified for r in receiver.received)  # each try signed anew
    assert count(metrics, "breaker.opened", "sent") == 1
    assert count(metrics, "breaker.opened", "failed") == 0


async def test_a_refusal_is_not_tried_again(memory_store: Store, receiver: Receiver) -> None:
    receiver.statuses = [400]
    metrics = Metrics()
    notifier = await started(config_for(standard(receiver)), memory_store, metrics)
    try:
        notifier.notice(NOTICE)
        await until(lambda: count(metrics, "breaker.opened", "failed") == 1, 10.0)
    finally:
        await notifier.close(5.0)
    assert [r.status for r in receiver.received] == [400]


async def test_slack_format_is_text_and_unsigned(memory_store: Store) -> None:
    receiver = await Receiver(secret=None).start()
    try:
        config = config_for({"url": receiver.url, "format": "slack"})
        notifier = await started(config, memory_store, Metrics())
        try:
            notifier.notice(Notice(NoticeKind.DEAD_LETTERS, "stripe",
                                   {"dead": 3, "threshold": 1}))
            await receiver.wait_for(1)
        finally:
            await notifier.close(5.0)
    finally:
        await receiver.stop()
    [got] = receiver.received
    assert list(got.json) == ["text"]
    assert "provider stripe has 3 dead events (threshold 1)" in got.json["text"]
    assert "webhook-signature" not in got.headers


async def test_a_target_gets_only_the_kinds_it_asks_for(memory_store: Store,
                                                        receiver: Receiver) -> None:
    metrics = Metrics()
    config = config_for(standard(receiver, events=["breaker.opened"],
                                 headers={"Authorization": "Bearer t0ken"}))
    notifier = await started(config, memory_store, metrics)
    try:
        notifier.notice(Notice(NoticeKind.PAUSED, "stripe"))
        notifier.notice(NOTICE)
        await receiver.wait_for(1)
    finally:
        await notifier.close(5.0)
    assert [r.json["type"] for r in receiver.received] == ["breaker.opened"]
    assert receiver.received[0].headers["authorization"] == "Bearer t0ken"


async def test_a_condition_is_sent_once_per_interval(memory_store: Store,
                                                     receiver: Receiver) -> None:
    metrics = Metrics()
    notifier = await started(config_for(standard(receiver)), memory_store, metrics)
    try:
        for _ in range(3):
            notifier.notice(NOTICE)
        notifier.notice(Notice(NoticeKind.BREAKER_OPENED, "github"))  # another condition
        await until(lambda: count(metrics, "breaker.opened", "suppressed") == 2, 10.0)
        await receiver.wait_for(2)
    finally:
        await notifier.close(5.0)
    assert sorted(r.json["data"]["provider"] for r in receiver.received) == ["github", "stripe"]


@pytest.mark.postgres
async def test_two_processes_noticing_one_condition_send_one_message(
        pg_dsn: str, receiver: Receiver) -> None:
    """Two notifiers, each with its own pool on one database, as two replicas would be."""
    config = config_for(standard(receiver))
    stores = [await PostgresStore.connect(pg_dsn, min_size=1, max_size=2) for _ in range(2)]
    metrics = [Metrics(), Metrics()]
    notifiers = [await started(config, s, m) for s, m in zip(stores, metrics, strict=True)]
    condition = Notice(NoticeKind.DEAD_LETTERS, f"p{time.time_ns()}", {"dead": 1})
    try:
        for notifier in notifiers:
            notifier.notice(condition)
        await until(lambda: sum(count(m, "dead_letters.threshold", result) for m in metrics
                                for result in ("sent", "suppressed")) == 2, 10.0)
    finally:
        for notifier in notifiers:
            await notifier.close(5.0)
        for s in stores:
            await s.close()
    assert len(receiver.received) == 1
    assert sorted(count(m, "dead_letters.threshold", "sent") for m in metrics) == [0, 1]


async def test_a_full_queue_drops_and_counts_never_raises(memory_store: Store,
                                                          receiver: Receiver) -> None:
    metrics = Metrics()
    notifier = Notifier(config_for(standard(receiver)).notify, memory_store, metrics,
                        queue_size=2)  # not started: nothing takes from the queue
    for _ in range(5):
        notifier.notice(NOTICE)
    assert count(metrics, "breaker.opened", "dropped") == 3
    await notifier.close(0.1)


async def test_close_is_bounded_while_a_target_hangs(memory_store: Store,
                                                     receiver: Receiver) -> None:
    receiver.hold.clear()
    notifier = await started(config_for(standard(receiver)), memory_store, Metrics())
    notifier.notice(NOTICE)
    await receiver.wait_arrived(1)
    began = time.monotonic()
    await notifier.close(0.3)
    assert time.monotonic() - began < 2.0


async def test_the_test_message_goes_to_every_target(receiver: Receiver) -> None:
    refusing = await Receiver(statuses=[404]).start()
    try:
        config = config_for(standard(receiver, events=["provider.paused"]), standard(refusing))
        notifier = await started(config, None, Metrics())
        try:
            results = await notifier.send_test("stripe")
        finally:
            await notifier.close(1.0)
    finally:
        await refusing.stop()
    assert [(r.sent, r.status, r.tries) for r in results] == [(True, 200, 1), (False, 404, 1)]
    assert results[1].error == "answered 404"
    assert receiver.received[0].json["type"] == "notify.test"
    assert receiver.received[0].verified
    assert "hooks/notify" not in results[0].target  # the host only, never the URL's path


async def test_a_command_hands_notices_over_and_they_are_sent_when_it_ends(
        sqlite_store: Store, receiver: Receiver) -> None:
    config = config_for(standard(receiver))
    async with open_notices(config, sqlite_store) as notices:
        notices.notice(Notice(NoticeKind.PAUSED, "stripe", {"by": "cli"}))
    # The block's end drained it: the message is in before anything is awaited here.
    assert [r.json["type"] for r in receiver.answered()] == ["provider.paused"]


async def test_without_targets_a_command_gets_no_notices(sqlite_store: Store) -> None:
    async with open_notices(config_for(), sqlite_store) as notices:
        assert isinstance(notices, NoNotices)


class Unreadable(Mapping[str, object]):
    """A notice's detail that cannot be copied into a message (well typed: a compiled
    ``Notice`` takes it as it would take any mapping)."""

    def __getitem__(self, key: str) -> object:
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("this detail cannot be read")

    def __len__(self) -> int:
        return 1


async def test_a_bad_notice_fails_alone(memory_store: Store, receiver: Receiver) -> None:
    metrics = Metrics()
    notifier = await started(config_for(standard(receiver)), memory_store, metrics)
    try:
        notifier.notice(Notice(NoticeKind.BREAKER_CLOSED, "stripe", Unreadable()))
        notifier.notice(NOTICE)
        await receiver.wait_for(1)
    finally:
        await notifier.close(5.0)
    assert [r.json["type"] for r in receiver.received] == ["breaker.opened"]
