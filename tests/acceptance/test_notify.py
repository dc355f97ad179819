"""Notifications with real proxy processes: dead letters reaching the threshold (queue mode, an
app answering 400, ``max_attempts: 1``) and signatures failing, each noticed by two processes
sharing one PostgreSQL and sent once; a target that hangs leaves deliveries answered in normal
time; ``notify test`` and ``check-config`` as an operator runs them. Every message is checked by
the official ``standardwebhooks`` package (``tests/notify_receiver.py``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.acceptance.conftest import Deployment, create_database, deploy, drop_database, run_cli
from tests.notify_receiver import SECRET, Receiver
from tests.support import (
    ProxyProcess,
    Seen,
    StubApp,
    base_config,
    post,
    stripe_event,
    stripe_headers,
    until,
    write_config,
)

SETTLED = ("notification_sent", "notification_suppressed")


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    target = await Receiver().start()
    try:
        yield target
    finally:
        await target.stop()


def notify(receiver: Receiver, **more: Any) -> dict[str, Any]:
    return {"targets": [{"url": receiver.url, "secret": SECRET}], **more}


def settled(proc: ProxyProcess, kind: str) -> bool:
    """The process claimed its message of ``kind`` and sent it, or found it sent already."""
    return any(e.get("event") in SETTLED and e.get("kind") == kind for e in proc.logs)


async def answer_400(seen: Seen) -> web.StreamResponse:
    return web.json_response({"error": "no"}, status=400)


@pytest.mark.postgres
async def test_dead_letters_noticed_by_two_processes_are_sent_once(
        pg_dsn: str, tmp_path: Path, receiver: Receiver) -> None:
    app = await StubApp().start()
    app.behaviour = answer_400
    store_url = await create_database(pg_dsn)
    config = base_config(app.url, store_url)
    stripe = config["providers"]["stripe"]
    stripe.update({"mode": "queue", "queue": {"max_attempts": 1, "poll_interval": "100ms"}})
    config["providers"] = {"stripe": stripe}
    config["maintenance"] = {"interval": "200ms"}  # each process reads the dead count
    config["notify"] = notify(receiver, dead_letters=1)
    path = write_config(tmp_path, config)
    procs: list[ProxyProcess] = []
    try:
        code, _, err = await run_cli("migrate", "--config", str(path))
        assert code == 0, err
        procs = list(await asyncio.gather(ProxyProcess(path).start(),
                                          ProxyProcess(path).start()))
        async with aiohttp.ClientSession() as client:
            body = stripe_event("evt_dead")
            status, _, _ = await post(client, procs[0].url + "/webhooks/stripe", body,
                                      stripe_headers(body))
        assert status == 200
        await app.wait_for(lambda: app.count("evt_dead") == 1, what="the one attempt")
        await receiver.wait_for(1)
        await until(lambda: all(settled(p, "dead_letters.threshold") for p in procs), 15.0)
    finally:
        for proc in procs:
            await proc.kill()
        await app.stop()
        await drop_database(pg_dsn, store_url)
    [got] = receiver.received
    assert got.verified
    assert got.json["type"] == "dead_letters.threshold"
    assert got.json["data"] == {"provider": "stripe", "dead": 1, "threshold": 1}


@pytest.fixture
async def pg_dep(pg_dsn: str, tmp_path: Path) -> AsyncIterator[Deployment]:
    async with deploy("postgres", tmp_path, pg_dsn) as dep:
        yield dep


@pytest.mark.postgres
async def test_failing_signatures_noticed_by_two_processes_are_sent_once(
        pg_dep: Deployment, receiver: Receiver) -> None:
    pg_dep.config["notify"] = notify(receiver, signature_failures={"count": 3,
                                                                    "window": "1m"})
    await pg_dep.start(2)
    assert pg_dep.client is not None
    for i in range(3):
        for proc in pg_dep.procs:
            body = stripe_event(f"evt_forged_{i}")
            status, _, _ = await post(pg_dep.client, proc.url + "/webhooks/stripe", body,
                                      stripe_headers(body, secret="whsec_not_the_secret"))
            assert status == 401
    await receiver.wait_for(1)
    await until(lambda: all(settled(p, "signatures.failing") for p in pg_dep.procs), 15.0)
    await pg_dep.stop()
    [got] = receiver.received
    assert got.verified
    assert got.json["type"] == "signatures.failing"
    assert got.json["data"] == {"provider": "stripe", "failures": 3, "window": "1m"}
    assert pg_dep.stub.count() == 0


async def test_a_hanging_target_leaves_deliveries_answered_in_normal_time(
        tmp_path: Path, receiver: Receiver) -> None:
    receiver.hold.clear()  # the target takes the message and never answers
    async with deploy("sqlite", tmp_path, None) as dep:
        dep.config["notify"] = notify(receiver, signature_failures={"count": 1})
        await dep.start()
        assert dep.client is not None
        url = dep.url(0, "/webhooks/stripe")
        forged = stripe_event("evt_forged")
        began = time.monotonic()
        status, _, _ = await post(dep.client, url, forged,
                                  stripe_headers(forged, secret="whsec_not_the_secret"))
        timings = [time.monotonic() - began]  # the delivery that started the condition
        assert status == 401
        await receiver.wait_arrived(1)  # the notifier is now stuck on the target
        for i in range(5):
            body = stripe_event(f"evt_ok_{i}")
            began = time.monotonic()
            status, _, _ = await post(dep.client, url, body, stripe_headers(body))
            timings.append(time.monotonic() - began)
            assert status == 200
        assert not receiver.answered(), "still hanging while the deliveries were answered"
        assert max(timings) < 1.0, timings
        receiver.hold.set()
        await dep.stop()


async def test_notify_test_reports_each_target(tmp_path: Path, receiver: Receiver) -> None:
    refusing = await Receiver(statuses=[403]).start()
    try:
        config = base_config("http://127.0.0.1:9", f"sqlite:///{tmp_path / 'events.db'}")
        config["notify"] = {"targets": [{"url": receiver.url, "secret": SECRET},
                                        {"url": refusing.url, "secret": SECRET}]}
        path = write_config(tmp_path, config)
        code, out, err = await run_cli("notify", "test", "--config", str(path),
                                       "--provider", "github")
    finally:
        await refusing.stop()
    assert code == 1, err
    lines = out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("sent    127.0.0.1 (standard): 200 after 1 try (msg_")
    assert lines[1].startswith("failed  127.0.0.1 (standard): answered 403 after 1 try (msg_")
    [got] = receiver.received
    assert got.verified and got.json["type"] == "notify.test"
    assert got.json["data"]["provider"] == "github"


BAD_TARGETS = """\
upstream:
  url: http://127.0.0.1:3000
providers:
  stripe:
    path: /webhooks/stripe
    preset: stripe
    secrets: [whsec_inline_secret_value]
notify:
  targets:
    - url: ftp://ops.example.com/hooks
      secret: whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw
    - url: https://ops.example.com/hooks
      events: [breaker.opened]
    - url: https://hooks.slack.com/services/T0/B0/x
      format: slack
"""


async def test_check_config_names_bad_targets_with_their_lines(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(BAD_TARGETS)
    code, out, err = await run_cli("check-config", "--config", str(path))
    assert code == 2, out
    assert err.splitlines() == [
        f"{path}:10:7: notify.targets[0].url: must be an http:// or https:// URL with a host",
        f"{path}:12:7: notify.targets[1].secret: is required for format: standard (a whsec_ "
        "secret that signs each message); or set format: slack",
        f"2 problems in {path}",
    ]


async def test_check_config_names_targets_by_host_never_by_url(tmp_path: Path) -> None:
    config = base_config("http://127.0.0.1:9", f"sqlite:///{tmp_path / 'events.db'}")
    config["notify"] = {"interval": "10m", "targets": [
        {"url": "https://hooks.slack.com/services/T0/B0/s3cr3t-token", "format": "slack"}]}
    code, out, err = await run_cli("check-config", "--config",
                                   str(write_config(tmp_path, config)))
    assert code == 0, err
    assert ("notify: hooks.slack.com (slack); at most one message per condition every 10m"
            in out.splitlines())
    assert "s3cr3t" not in out + err
