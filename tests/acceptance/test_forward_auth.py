"""Forward authentication: the proxy signs what it sends to the app in the Standard Webhooks
format (``upstream.signing_secrets``), checked by the ``standardwebhooks`` libraries an app
would use — Python's and, as a second oracle, npm's — never only by our own code. The proxy runs
as a real subprocess on SQLite; the app is a real HTTP server on loopback."""

from __future__ import annotations

import base64
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from standardwebhooks import Webhook, WebhookVerificationError

from sidecar.config.loader import parse_config
from sidecar.core.errors import ConfigError
from sidecar.core.signing.forward import decode_forward_secret, forward_signature
from tests.acceptance.conftest import Deployment, deploy, run_cli
from tests.node_oracle import Oracle
from tests.support import Seen, base_config, post, stripe_event, stripe_headers, write_config

STRIPE = "/webhooks/stripe"
SIGNED = ("webhook-id", "webhook-timestamp", "webhook-signature")


def new_secret() -> str:
    return "whsec_" + base64.b64encode(os.urandom(32)).decode()


def python_verifies(secret: str, seen: Seen) -> bool:
    try:
        Webhook(secret).verify(seen.body, {k.lower(): v for k, v in seen.headers.items()})
    except WebhookVerificationError:
        return False
    return True


def node_verifies(node_oracle: Oracle, secret: str, body: bytes,
                  headers: dict[str, str]) -> bool:
    answer = node_oracle({"provider": "standardwebhooks", "action": "verify", "secret": secret,
                          "body_b64": base64.b64encode(body).decode(),
                          "headers": {k.lower(): v for k, v in headers.items()}})
    valid: bool = answer["valid"]
    return valid


@pytest.fixture
async def signed(tmp_path: Path) -> AsyncIterator[tuple[Deployment, Path, str]]:
    """One proxy on SQLite whose forwards are signed with a file secret (re-read every 200ms)."""
    secret = new_secret()
    secret_file = tmp_path / "forward-signing"
    secret_file.write_text(secret + "\n")
    async with deploy("sqlite", tmp_path, None) as dep:
        dep.config["upstream"]["signing_secrets"] = [{"file": str(secret_file)}]
        dep.config["maintenance"] = {"secrets_reload_interval": "200ms"}
        dep.config["providers"]["stripe"]["store_payload"] = True
        yield dep, secret_file, secret


async def test_every_forward_verifies_with_both_libraries_and_a_forgery_does_not(
        signed: tuple[Deployment, Path, str], node_oracle: Oracle) -> None:
    dep, _, secret = signed
    await dep.start(1)
    assert dep.client is not None
    body = stripe_event("evt_signed")
    assert (await post(dep.client, dep.url(0, STRIPE), body, stripe_headers(body)))[0] == 200
    [seen] = dep.stub.seen
    assert seen.headers["webhook-id"] == "stripe:evt_signed"  # the proxy's idempotency key
    assert abs(int(seen.headers["webhook-timestamp"]) - time.time()) < 60
    assert python_verifies(secret, seen)
    assert node_verifies(node_oracle, secret, seen.body, seen.headers)

    # What someone who reaches the app directly could send: each is rejected by both.
    tampered = Seen(seen.event_id, seen.attempt, seen.idempotency_key, seen.body + b" ",
                    seen.headers)
    assert not python_verifies(secret, tampered)
    assert not node_verifies(node_oracle, secret, tampered.body, seen.headers)
    assert not python_verifies(new_secret(), seen)
    assert not node_verifies(node_oracle, new_secret(), seen.body, seen.headers)
    no_signature = {k: v for k, v in seen.headers.items() if k.lower() not in SIGNED}
    assert not node_verifies(node_oracle, secret, seen.body, no_signature)


async def test_a_redrive_hours_later_carries_a_fresh_valid_signature(
        signed: tuple[Deployment, Path, str], node_oracle: Oracle) -> None:
    dep, _, secret = signed

    async def down_then_up(seen: Seen) -> web.StreamResponse:
        return web.json_response({}, status=503 if seen.attempt == 1 else 200)

    dep.stub.behaviour = down_then_up
    await dep.start(1)
    assert dep.client is not None
    body = stripe_event("evt_redriven")
    assert (await post(dep.client, dep.url(0, STRIPE), body, stripe_headers(body)))[0] == 503

    code, out, err = await run_cli("events", "redrive", "stripe", "evt_redriven", "--config",
                                   str(write_config(dep.tmp, dep.config)))
    assert code == 0, out + err
    first, second = dep.stub.seen
    assert second.attempt == 2
    assert int(second.headers["webhook-timestamp"]) >= int(first.headers["webhook-timestamp"])
    assert python_verifies(secret, second)
    assert node_verifies(node_oracle, secret, second.body, second.headers)


async def test_a_rewritten_signing_secret_file_signs_the_next_forward(
        signed: tuple[Deployment, Path, str]) -> None:
    dep, secret_file, old = signed
    await dep.start(1)
    proc = dep.procs[0]
    assert dep.client is not None
    rotated = new_secret()
    secret_file.write_text(rotated + "\n")
    reload = await proc.wait_for_log("secrets_reloaded")
    assert reload["provider"] == "upstream.signing_secrets"
    body = stripe_event("evt_after_rotation")
    assert (await post(dep.client, dep.url(0, STRIPE), body, stripe_headers(body)))[0] == 200
    [seen] = dep.stub.seen
    assert python_verifies(rotated, seen) and not python_verifies(old, seen)


async def test_two_secrets_sign_so_an_app_with_either_accepts(tmp_path: Path) -> None:
    old, new = new_secret(), new_secret()
    async with deploy("sqlite", tmp_path, None) as dep:
        dep.config["upstream"]["signing_secrets"] = [new, old]
        await dep.start(1)
        assert dep.client is not None
        body = stripe_event("evt_both")
        assert (await post(dep.client, dep.url(0, STRIPE), body, stripe_headers(body)))[0] == 200
        [seen] = dep.stub.seen
        assert len(seen.headers["webhook-signature"].split(" ")) == 2
        assert python_verifies(old, seen) and python_verifies(new, seen)


async def test_without_signing_secrets_forwards_carry_no_proxy_signature(
        tmp_path: Path) -> None:
    async with deploy("sqlite", tmp_path, None) as dep:
        await dep.start(1)
        assert dep.client is not None
        body = stripe_event("evt_unsigned")
        assert (await post(dep.client, dep.url(0, STRIPE), body, stripe_headers(body)))[0] == 200
        [seen] = dep.stub.seen
        assert not {k.lower() for k in seen.headers} & set(SIGNED)


# --- the signature itself, against the libraries, without a proxy ----------------------------

def test_a_stale_or_future_signature_is_rejected_by_both_libraries(node_oracle: Oracle) -> None:
    secret = new_secret()
    key = decode_forward_secret(secret, "test")
    body = b'{"id":"evt_1"}'
    for skew in (-600, 600):  # the libraries' tolerance is 5 minutes either way
        headers = forward_signature([key], "stripe:evt_1", body, time.time() + skew)
        seen = Seen("evt_1", 1, "stripe:evt_1", body, headers)
        assert not python_verifies(secret, seen)
        assert not node_verifies(node_oracle, secret, body, headers)
    fresh = forward_signature([key], "stripe:evt_1", body, time.time())
    assert python_verifies(secret, Seen("evt_1", 1, "stripe:evt_1", body, fresh))
    assert node_verifies(node_oracle, secret, body, fresh)


@pytest.mark.parametrize("value, message", [
    ("not-a-whsec-secret-at-all", "must be a Standard Webhooks secret"),
    ("whsec_!!!not base64!!!", "not valid base64"),
    ("whsec_" + base64.b64encode(b"short").decode(), "too short"),
])
def test_a_bad_signing_secret_is_a_config_error_that_never_quotes_it(
        value: str, message: str) -> None:
    data: dict[str, Any] = base_config("http://127.0.0.1:9", "sqlite:///unused.db")
    data["upstream"]["signing_secrets"] = [value]
    with pytest.raises(ConfigError) as caught:
        parse_config(data, env={})
    assert "upstream.signing_secrets[0]" in str(caught.value)
    assert message in str(caught.value) and value not in str(caught.value)
