"""Operating the proxy: metrics, logs, admin surface, stuck events, re-drive, secret rotation.
Real processes on real stores."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import os
import re
import time
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families
from standardwebhooks import Webhook

from tests.acceptance.conftest import Deployment, deploy, run_cli
from tests.support import STRIPE_SECRET, Seen, post, stripe_event, stripe_headers, write_config

STRIPE = "/webhooks/stripe"


async def metric_samples(client: aiohttp.ClientSession, admin_url: str) -> dict[tuple, float]:
    async with client.get(admin_url + "/metrics") as resp:
        assert resp.status == 200
        text = await resp.text()
    samples: dict[tuple, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def events_total(samples: dict[tuple, float], provider: str) -> dict[str, float]:
    return {dict(labels)["result"]: value for (name, labels), value in samples.items()
            if name == "webhook_events_total" and dict(labels).get("provider") == provider}


async def test_metrics_count_each_result_exactly(deployment: Deployment) -> None:
    async def fail_first(seen: Seen) -> web.StreamResponse:
        status = 500 if seen.event_id == "evt_flaky" and seen.attempt == 1 else 200
        return web.json_response({}, status=status)

    deployment.stub.behaviour = fail_first
    await deployment.start(1)
    client, proc = deployment.client, deployment.procs[0]
    assert client is not None
    url = proc.url + STRIPE

    async def send(body: bytes, headers: dict[str, str] | None = None) -> int:
        return (await post(client, url, body, headers or stripe_headers(body)))[0]

    a, b, flaky = stripe_event("evt_a"), stripe_event("evt_b"), stripe_event("evt_flaky")
    assert await send(a) == 200  # new
    assert await send(b) == 200  # new
    assert await send(a) == 200  # duplicate
    assert await send(a) == 200  # duplicate
    assert await send(a, stripe_headers(a, secret="whsec_wrong")) == 401  # invalid_signature
    assert await send(json.dumps({"type": "x"}).encode()) == 400  # bad_request
    assert await send(flaky) == 500  # upstream_error
    assert await send(flaky) == 200  # takeover
    deployment.stub.hold.clear()
    held = stripe_event("evt_held")
    first = asyncio.create_task(send(held))  # new (answered below)
    await deployment.stub.wait_for(lambda: deployment.stub.count("evt_held") == 1)
    assert await send(held) == 409  # in_flight
    deployment.stub.hold.set()
    assert await first == 200

    counts = events_total(await metric_samples(client, proc.admin_url), "stripe")
    assert counts == {"new": 3, "duplicate": 2, "invalid_signature": 1, "bad_request": 1,
                      "upstream_error": 1, "takeover": 1, "in_flight": 1}
    samples = await metric_samples(client, proc.admin_url)
    labels = (("provider", "stripe"), ("upstream", deployment.stub.url))
    assert samples[("webhook_upstream_latency_seconds_count", labels)] == 5


async def test_provider_listener_serves_no_admin_routes(deployment: Deployment) -> None:
    await deployment.start(1)
    client, proc = deployment.client, deployment.procs[0]
    assert client is not None
    for path in ("/metrics", "/healthz", "/readyz", "/admin/events"):
        async with client.get(proc.url + path) as resp:
            assert resp.status == 404, path
        async with client.get(proc.admin_url + path) as resp:
            assert resp.status == 200, path


async def test_debug_logs_never_contain_secrets_signatures_or_bodies(
    deployment: Deployment,
) -> None:
    deployment.config["log"]["level"] = "debug"
    await deployment.start(1)
    client, proc = deployment.client, deployment.procs[0]
    assert client is not None
    marker = "BODY-MARKER-7f3a9c"
    signatures = []
    for i in range(3):
        body = stripe_event(f"evt_log_{i}", note=marker)
        headers = stripe_headers(body)
        signatures.append(headers["Stripe-Signature"].split("v1=")[1])
        await post(client, proc.url + STRIPE, body, headers)
        await post(client, proc.url + STRIPE, body, headers)  # a replay too
        bad = stripe_headers(body, secret="whsec_wrong")
        signatures.append(bad["Stripe-Signature"].split("v1=")[1])
        await post(client, proc.url + STRIPE, body, bad)
    await proc.terminate()
    deployment.procs = []
    logs = "\n".join(proc.raw_logs)
    assert any(e.get("event") == "delivery" for e in proc.logs)
    assert any(e.get("level") == "debug" for e in proc.logs), "DEBUG was really on"
    for forbidden in [STRIPE_SECRET, "It's a Secret to Everybody", marker, *signatures]:
        assert forbidden not in logs


async def test_stuck_event_found_by_list_released_then_forwarded(deployment: Deployment) -> None:
    deployment.config["providers"]["stripe"]["lease"] = "60s"  # stuck for a long while
    await deployment.start(1)
    client, proc = deployment.client, deployment.procs[0]
    assert client is not None
    body = stripe_event("evt_stuck")
    deployment.stub.hold.clear()
    inflight = asyncio.create_task(post(client, proc.url + STRIPE, body, stripe_headers(body)))
    await deployment.stub.wait_for(lambda: deployment.stub.count("evt_stuck") == 1)
    await proc.kill()  # the attempt's owner is gone; its lease would hold for a minute
    with pytest.raises(aiohttp.ClientError):
        await inflight
    deployment.stub.hold.set()
    config_path = str(write_config(deployment.tmp, deployment.config))

    code, out, err = await run_cli("events", "list", "--config", config_path,
                                   "--state", "processing", "--json")
    assert code == 0, err
    listed = [json.loads(line) for line in out.splitlines()]
    assert [(e["event_id"], e["attempt"], e["lease_live"]) for e in listed] == [
        ("evt_stuck", 1, True)]

    # Its lease is still live: a plain release refuses, naming the way out; nothing changes.
    code, out, err = await run_cli("events", "release", "stripe", "evt_stuck",
                                   "--config", config_path)
    assert code == 1 and "live lease" in err and "--force" in err, out + err
    row = await deployment.rows.one("stripe", "evt_stuck")
    assert row is not None and row["state"] == "processing"

    code, out, err = await run_cli("events", "release", "stripe", "evt_stuck",
                                   "--config", config_path, "--force")
    assert code == 0, err
    assert "next redelivery is forwarded as attempt 2" in out
    assert "warning" in err and "lease was live" in err

    await deployment.start(1)
    status, headers, _ = await post(client, deployment.url(0, STRIPE), body,
                                    stripe_headers(body))
    assert status == 200 and headers["X-Webhook-Sidecar-Attempt"] == "2"
    assert deployment.stub.attempts("evt_stuck") == [1, 2]

    code, _, err = await run_cli("events", "release", "stripe", "evt_stuck",
                                 "--config", config_path)
    assert code == 1 and "is done" in err + _


async def test_failed_event_redriven_from_its_stored_payload(deployment: Deployment) -> None:
    async def down_then_up(seen: Seen) -> web.StreamResponse:
        return web.json_response({}, status=503 if seen.attempt == 1 else 200)

    deployment.stub.behaviour = down_then_up
    deployment.config["providers"]["stripe"]["store_payload"] = True
    await deployment.start(1)
    client = deployment.client
    assert client is not None
    body = stripe_event("evt_redrive")
    assert (await post(client, deployment.url(0, STRIPE + "?source=test"), body,
                       stripe_headers(body)))[0] == 503
    config_path = str(write_config(deployment.tmp, deployment.config))

    code, out, err = await run_cli("events", "redrive", "stripe", "evt_redrive",
                                   "--config", config_path)
    assert code == 0, out + err
    assert "as attempt 2" in out and "HTTP 200" in out
    second = deployment.stub.seen[-1]
    assert (second.attempt, second.body) == (2, body)  # the stored request, byte for byte
    assert (await deployment.rows.one("stripe", "evt_redrive"))["state"] == "done"  # type: ignore[index]

    status, headers, _ = await post(client, deployment.url(0, STRIPE), body, stripe_headers(body))
    assert status == 200 and headers["X-Webhook-Sidecar-Replay"] == "true"


async def test_events_commands_need_only_the_store_settings(tmp_path: Path) -> None:
    """On a bastion host with the deployment's config but none of its secrets (provider
    secrets, the forward-signing secret, the admin token): list, show and release read the
    store; a re-drive signs its forward, so it needs the signing secret, and only that."""
    signing = "whsec_" + base64.b64encode(bytes(range(32))).decode()

    async def down_then_up(seen: Seen) -> web.StreamResponse:
        return web.json_response({}, status=503 if seen.attempt == 1 else 200)

    async with deploy("sqlite", tmp_path, None) as dep:
        dep.stub.behaviour = down_then_up
        dep.config["providers"]["stripe"]["store_payload"] = True
        dep.config["upstream"]["signing_secrets"] = [signing]
        await dep.start(1)
        assert dep.client is not None
        body = stripe_event("evt_bastion")
        assert (await post(dep.client, dep.url(0, STRIPE), body, stripe_headers(body)))[0] == 503

        bastion = copy.deepcopy(dep.config)  # every secret as the chart renders it: elsewhere
        bastion["admin_token"] = "${BASTION_ADMIN_TOKEN}"
        bastion["upstream"]["signing_secrets"] = ["${BASTION_SIGNING_SECRET}"]
        bastion["providers"]["stripe"]["secrets"] = ["${BASTION_STRIPE_SECRET}"]
        bastion["providers"]["github"]["secrets"] = [{"env": "BASTION_GITHUB_SECRET"}]
        bastion["providers"]["slack"]["secrets"] = [{"file": str(tmp_path / "not-mounted")}]
        path = str(write_config(tmp_path, bastion, "bastion.yaml"))
        env = {name: value for name, value in os.environ.items()
               if not name.startswith("BASTION_")}

        code, out, err = await run_cli("events", "list", "--config", path, "--json", env=env)
        assert code == 0, err
        assert [(e["event_id"], e["state"]) for e in map(json.loads, out.splitlines())] == [
            ("evt_bastion", "failed")]
        code, out, err = await run_cli("events", "show", "stripe", "evt_bastion", "--config",
                                       path, "--json", env=env)
        assert code == 0 and json.loads(out)["state"] == "failed", err
        code, out, err = await run_cli("events", "release", "stripe", "evt_bastion",
                                       "--config", path, env=env)
        assert code == 0 and "released stripe:evt_bastion" in out, err

        code, out, err = await run_cli("events", "redrive", "stripe", "evt_bastion",
                                       "--config", path, env=env)
        assert code == 2 and "upstream.signing_secrets[0]" in err, out + err
        assert "BASTION_SIGNING_SECRET" in err and "providers." not in err
        code, out, err = await run_cli("events", "redrive", "stripe", "evt_bastion",
                                       "--config", path,
                                       env={**env, "BASTION_SIGNING_SECRET": signing})
        assert code == 0 and "as attempt 2" in out and "HTTP 200" in out, out + err
        forward = dep.stub.seen[-1]
        Webhook(signing).verify(forward.body, {k.lower(): v for k, v in forward.headers.items()})


async def test_show_gives_times_bodies_and_the_stored_request(deployment: Deployment) -> None:
    async def answer(seen: Seen) -> web.StreamResponse:
        if seen.event_id == "evt_binary":
            return web.Response(status=503, body=b"\xff\xfe\x00 not utf-8",
                                content_type="application/octet-stream")
        return web.Response(body='{"ok": true, "note": "d\u00e9j\u00e0 vu"}'.encode(),
                            content_type="application/json")

    deployment.stub.behaviour = answer
    deployment.config["providers"]["stripe"]["store_payload"] = True
    await deployment.start(1)
    client = deployment.client
    assert client is not None
    text_body, binary_body = stripe_event("evt_text"), stripe_event("evt_binary")
    for body in (text_body, binary_body):
        await post(client, deployment.url(0, STRIPE + "?source=show"), body, stripe_headers(body))
    config_path = str(write_config(deployment.tmp, deployment.config))

    code, out, err = await run_cli("events", "show", "stripe", "evt_text", "--config", config_path)
    assert code == 0, err
    assert "stripe:evt_text" in out and "done (attempt 1)" in out
    assert re.search(r"received +\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z \([\d.]+s ago\)", out), out
    assert "outcome     response: HTTP 200" in out
    assert '{"ok": true, "note": "d\u00e9j\u00e0 vu"}' in out  # the response body as text
    assert f"request     POST {STRIPE}?source=show" in out
    assert text_body.decode() in out  # the stored request body, as text
    assert "Stripe-Signature: t=" in out

    code, out, err = await run_cli("events", "show", "stripe", "evt_text", "--config", config_path,
                                   "--json")
    assert code == 0, err
    shown = json.loads(out)
    # The fields scripts read before stay, with the same meaning.
    assert {"provider", "event_id", "state", "attempt", "received_at", "updated_at",
            "age_seconds", "lease_until", "lease_live", "outcome", "response_status",
            "latency_ms", "body_sha256", "response_headers", "response_body_base64",
            "payload_stored"} <= set(shown)
    assert shown["received_at_iso"].endswith("Z") and shown["lease_until_iso"] is None
    assert json.loads(shown["response_body_text"]) == {"ok": True, "note": "d\u00e9j\u00e0 vu"}
    request = shown["request"]
    assert (request["method"], request["path"]) == ("POST", STRIPE + "?source=show")
    assert (request["body_text"], request["body_base64"]) == (text_body.decode(), None)
    assert any(name.lower() == "stripe-signature" for name, _ in request["headers"])

    code, out, err = await run_cli("events", "show", "stripe", "evt_binary", "--config",
                                   config_path, "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert shown["state"] == "failed" and shown["response_status"] == 503
    assert shown["response_body_text"] is None
    assert base64.b64decode(shown["response_body_base64"]) == b"\xff\xfe\x00 not utf-8"
    code, out, err = await run_cli("events", "show", "stripe", "evt_binary", "--config",
                                   config_path)
    assert code == 0, err
    assert "response body (base64, not UTF-8)" in out
    assert base64.b64encode(b"\xff\xfe\x00 not utf-8").decode() in out


async def test_admin_api_lists_shows_and_releases(deployment: Deployment) -> None:
    deployment.config["admin_token"] = "t" * 24
    await deployment.start(1)
    client, proc = deployment.client, deployment.procs[0]
    assert client is not None
    body = stripe_event("evt_admin")
    assert (await post(client, proc.url + STRIPE, body, stripe_headers(body)))[0] == 200
    auth = {"Authorization": "Bearer " + "t" * 24}
    async with client.get(proc.admin_url + "/admin/events") as resp:
        assert resp.status == 401
    async with client.get(proc.admin_url + "/admin/events?provider=stripe&state=done",
                          headers=auth) as resp:
        listed = (await resp.json())["events"]
    assert [(e["event_id"], e["response_status"]) for e in listed] == [("evt_admin", 200)]
    async with client.get(proc.admin_url + "/admin/events?older_than=10m", headers=auth) as resp:
        assert resp.status == 200 and (await resp.json())["events"] == []  # it is seconds old
    async with client.get(proc.admin_url + "/admin/events?older_than=soon", headers=auth) as resp:
        assert resp.status == 400
    async with client.get(proc.admin_url + "/admin/events/stripe/evt_admin",
                          headers=auth) as resp:
        shown = await resp.json()
    assert shown["state"] == "done" and shown["payload_stored"] is False
    async with client.post(proc.admin_url + "/admin/events/stripe/evt_admin/release",
                           headers=auth) as resp:
        assert resp.status == 409  # done events are not released
    async with client.post(proc.admin_url + "/admin/events/stripe/evt_admin/release?force=true",
                           headers=auth) as resp:
        assert resp.status == 409  # not even forced
    async with client.post(proc.admin_url + "/admin/events/stripe/evt_admin/release?force=maybe",
                           headers=auth) as resp:
        assert resp.status == 400
    async with client.get(proc.admin_url + "/admin/events/stripe/nope", headers=auth) as resp:
        assert resp.status == 404


async def test_admin_api_releases_a_live_attempt_only_when_forced(
    deployment: Deployment,
) -> None:
    deployment.config["providers"]["stripe"]["lease"] = "60s"
    await deployment.start(1)
    client, proc = deployment.client, deployment.procs[0]
    assert client is not None
    body = stripe_event("evt_live")
    deployment.stub.hold.clear()
    inflight = asyncio.create_task(post(client, proc.url + STRIPE, body, stripe_headers(body)))
    await deployment.stub.wait_for(lambda: deployment.stub.count("evt_live") == 1)
    release = proc.admin_url + "/admin/events/stripe/evt_live/release"
    try:
        async with client.post(release) as resp:
            assert resp.status == 409
            error = (await resp.json())["error"]
        assert "live lease" in error and "force=true" in error
        async with client.get(proc.admin_url + "/admin/events/stripe/evt_live") as resp:
            assert (await resp.json())["state"] == "processing"
        async with client.post(release + "?force=true") as resp:
            assert resp.status == 200
            released = await resp.json()
        assert (released["state"], released["attempt"], released["forced_live_lease"]) == (
            "failed", 1, True)
    finally:
        deployment.stub.hold.set()
    await inflight
    row = await deployment.rows.one("stripe", "evt_live")
    assert row is not None and row["state"] == "failed", "the released attempt's record is fenced"


async def test_rewritten_secret_file_takes_effect_without_restart(deployment: Deployment) -> None:
    secret_file = deployment.tmp / "stripe-secret"
    secret_file.write_text(STRIPE_SECRET + "\n")
    deployment.config["providers"]["stripe"]["secrets"] = [{"file": str(secret_file)}]
    deployment.config["maintenance"] = {"secrets_reload_interval": "200ms"}
    await deployment.start(1)
    client, proc = deployment.client, deployment.procs[0]
    assert client is not None
    url = proc.url + STRIPE
    before = stripe_event("evt_before_rotation")
    assert (await post(client, url, before, stripe_headers(before)))[0] == 200

    new_secret = "whsec_rotated_0123456789abcdef"
    secret_file.write_text(new_secret + "\n")
    await proc.wait_for_log("secrets_reloaded")

    after = stripe_event("evt_after_rotation")
    assert (await post(client, url, after, stripe_headers(after, secret=STRIPE_SECRET)))[0] == 401
    assert (await post(client, url, after, stripe_headers(after, secret=new_secret)))[0] == 200
    assert proc.proc is not None and proc.proc.returncode is None  # the same process
    assert time.time() > 0
