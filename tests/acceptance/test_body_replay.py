"""Replayed bodies under a fresh, unsigned id (issue: a GitHub body resent with a new
X-GitHub-Delivery was forwarded again as a new event) and timestamps carried in the signed body
(Linear's webhookTimestamp). Real proxy processes on both stores; GitHub deliveries are GitHub's
published signature vector, Linear ones signed as @linear/sdk verifies them
(tests/unit/providers/test_node_oracles.py checks that agreement)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time

from tests.acceptance.conftest import Deployment
from tests.acceptance.test_operations import events_total, metric_samples
from tests.support import post, stripe_event, stripe_headers

GITHUB = "/webhooks/github"
LINEAR = "/webhooks/linear"
# GitHub's published vector (docs: "Validating webhook deliveries").
VECTOR_BODY = b"Hello, World!"
VECTOR_SIGNATURE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
LINEAR_SECRET = "lin_wh_acceptance_secret_0123456789"


def github(delivery: str) -> dict[str, str]:
    return {"X-Hub-Signature-256": VECTOR_SIGNATURE, "X-GitHub-Delivery": delivery,
            "X-GitHub-Event": "push"}


async def send(dep: Deployment, i: int, path: str, body: bytes,
               headers: dict[str, str]) -> tuple[int, dict[str, object]]:
    assert dep.client is not None
    status, _, payload = await post(dep.client, dep.url(i, path), body, headers)
    return status, (json.loads(payload) if payload.startswith(b"{") else {})


async def test_a_github_body_resent_under_a_new_delivery_id_is_refused(
        deployment: Deployment) -> None:
    await deployment.start()
    assert (await send(deployment, 0, GITHUB, VECTOR_BODY, github("first-delivery")))[0] == 200
    # GitHub's own redelivery keeps the id: answered from the row, as before.
    status, _ = await send(deployment, 1, GITHUB, VECTOR_BODY, github("first-delivery"))
    assert status == 200
    # The captured body under a fresh id: refused, on every process, and never forwarded.
    for i, fresh in enumerate(("forged-1", "forged-2")):
        status, answer = await send(deployment, i, GITHUB, VECTOR_BODY, github(fresh))
        assert (status, answer["reason"]) == (401, "replayed_body")
    assert deployment.stub.count() == 1
    assert {row["event_id"] for row in await deployment.rows.all()} == {"first-delivery"}
    assert deployment.client is not None
    refused = 0.0
    for proc in deployment.procs:
        samples = await metric_samples(deployment.client, proc.admin_url)
        refused += events_total(samples, "github").get("replayed_body", 0.0)
    assert refused == 2


async def test_with_on_body_replay_allow_the_same_body_is_a_new_event(
        deployment: Deployment) -> None:
    deployment.config["providers"]["github"]["on_body_replay"] = "allow"
    await deployment.start()
    for delivery in ("first-delivery", "second-delivery"):
        assert (await send(deployment, 0, GITHUB, VECTOR_BODY, github(delivery)))[0] == 200
    assert [s.event_id for s in deployment.stub.seen] == ["first-delivery", "second-delivery"]


async def test_copies_under_many_fresh_ids_at_once_reach_the_app_once(
        deployment: Deployment) -> None:
    """Real concurrency, across both processes on PostgreSQL: the first binding wins."""
    await deployment.start()
    answers = await asyncio.gather(*(
        send(deployment, i, GITHUB, VECTOR_BODY, github(f"race-{i}")) for i in range(12)))
    statuses = sorted(status for status, _ in answers)
    assert statuses == [200] + [401] * 11
    assert deployment.stub.count() == 1


async def test_a_provider_whose_id_is_signed_is_not_guarded(deployment: Deployment) -> None:
    """Stripe's id is in the signed body: the same body is the same event, so the guard stays
    off and costs nothing there (a byte-identical body cannot carry another id)."""
    await deployment.start()
    body = stripe_event("evt_same")
    for i in range(2):
        assert (await send(deployment, i, "/webhooks/stripe", body, stripe_headers(body)))[0] == 200
    assert deployment.stub.count() == 1


def linear(age_seconds: float) -> tuple[bytes, dict[str, str]]:
    stamp = int((time.time() - age_seconds) * 1000)
    body = json.dumps({"action": "create", "type": "Issue", "webhookTimestamp": stamp,
                       "data": {"id": "issue-1"}}).encode()
    signature = hmac.new(LINEAR_SECRET.encode(), body, hashlib.sha256).hexdigest()
    return body, {"Linear-Signature": signature, "Linear-Delivery": f"delivery-{stamp}",
                  "Linear-Event": "Issue"}


async def test_a_linear_body_ten_minutes_old_is_refused(deployment: Deployment) -> None:
    deployment.config["providers"]["linear"] = {"path": LINEAR, "preset": "linear",
                                                "secrets": [LINEAR_SECRET], "lease": "4s",
                                                "inflight_wait": "1s"}
    await deployment.start()
    body, headers = linear(age_seconds=600)
    status, answer = await send(deployment, 0, LINEAR, body, headers)
    assert (status, answer["reason"]) == (401, "stale_timestamp")
    body, headers = linear(age_seconds=0)
    assert (await send(deployment, 0, LINEAR, body, headers))[0] == 200
    assert deployment.stub.count() == 1
