"""``webhook-sidecar send`` against a real HTTP server on loopback that verifies every delivery
with the same preset (the proxy's dedupe end to end is an acceptance test): copies carry one
event id, ``--concurrent`` copies are in flight together, and the exit code follows the
answers."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web
from nacl.signing import SigningKey

from sidecar.cli import main
from sidecar.cli.samples import find_sample, samples_of
from sidecar.cli.send import refusal
from sidecar.config.presets import load_preset, preset_names
from sidecar.core.errors import VerificationError
from sidecar.core.eventid import delivery_items, parse_event_id_spec
from sidecar.core.signing import Delivery, decode_secret, parse_signature_spec, verify

PAYLOAD = b'{"id":"evt_send_1","type":"invoice.paid","event_id":"Ev1","data":{}}'


@dataclass
class Receiver:
    """A verifying endpoint. Answers 401 to a delivery that does not verify; marks every
    copy of an event after the first as a replay, like the proxy. With ``together`` > 1 it
    holds each answer until that many deliveries are in flight at once (or 5 s pass: 504)."""

    preset: str
    secrets: list[str]
    together: int = 1
    path: str = "/hook"
    seen: list[tuple[list[str], dict[str, str]]] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.path}"

    def _spec(self) -> tuple[object, list[bytes], object]:
        data = load_preset(self.preset)
        signature = data["signature"]
        assert isinstance(signature, dict)
        if self.preset in ("square", "hubspot", "twilio"):
            signature["url"] = self.url
        spec = parse_signature_spec(signature, "s")
        keys = [decode_secret(spec, secret, "k") for secret in self.secrets]
        return spec, keys, parse_event_id_spec(data["event_id"], "e")

    async def _serve(self, ready: threading.Event, stop: asyncio.Event) -> None:
        arrived = asyncio.Condition()
        in_flight = 0

        async def handle(request: web.Request) -> web.StreamResponse:
            nonlocal in_flight
            spec, keys, event_id = self._spec()
            body = await request.read()
            try:
                delivery = Delivery(body, request.headers,  # type: ignore[arg-type]
                                    request.method, request.rel_url.raw_query_string)
                verify(spec, keys, delivery, time.time())
            except VerificationError as exc:
                self.rejected.append(exc.reason)
                return web.json_response({"reason": exc.reason}, status=401)
            items = delivery_items(event_id, body, request.headers)  # type: ignore[arg-type]
            ids = [item.event_id for item in items]
            replay = any(previous == ids for previous, _ in self.seen)
            self.seen.append((ids, dict(request.headers)))
            async with arrived:
                in_flight += 1
                arrived.notify_all()
                try:
                    await asyncio.wait_for(
                        arrived.wait_for(lambda: in_flight >= self.together), 5)
                except TimeoutError:
                    return web.Response(status=504)
            headers = {"X-Webhook-Sidecar-Attempt": "1"}
            if replay:
                headers["X-Webhook-Sidecar-Replay"] = "true"
            return web.json_response({"ok": True}, headers=headers)

        app = web.Application()
        app.router.add_route("*", self.path, handle)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.port = runner.addresses[0][1]
        ready.set()
        await stop.wait()
        await runner.cleanup()


@pytest.fixture
def receiver_factory() -> Iterator[object]:
    stops: list[tuple[asyncio.AbstractEventLoop, asyncio.Event, threading.Thread]] = []

    def start(receiver: Receiver) -> Receiver:
        ready = threading.Event()
        loop = asyncio.new_event_loop()
        stop = asyncio.Event()

        def run() -> None:
            loop.run_until_complete(receiver._serve(ready, stop))
            loop.close()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        assert ready.wait(10)
        stops.append((loop, stop, thread))
        return receiver

    yield start
    for loop, stop, thread in stops:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)


@pytest.fixture
def payload(tmp_path: Path) -> Path:
    path = tmp_path / "payload.json"
    path.write_bytes(PAYLOAD)
    return path


def lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("#")]


def test_sequential_copies_of_one_stripe_event(
    receiver_factory: object, payload: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = "whsec_send_test_secret"
    receiver = receiver_factory(Receiver("stripe", [secret]))  # type: ignore[operator]
    code = main(["send", "--preset", "stripe", "--secret", secret, "--url", receiver.url,
                 "--file", str(payload), "--count", "3"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert [ids for ids, _ in receiver.seen] == [["evt_send_1"]] * 3
    assert [line.split()[:4] for line in lines(out)] == [
        ["#1", "status=200", "replay=-", "attempt=1"],
        ["#2", "status=200", "replay=true", "attempt=1"],
        ["#3", "status=200", "replay=true", "attempt=1"],
    ]
    assert "sent 3: 3 2xx, 0 other, 0 errors, 2 replays" in out


def test_concurrent_standard_webhooks_copies_share_a_generated_id(
    receiver_factory: object, payload: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = "whsec_" + base64.b64encode(b"send-concurrency-test-key-32byte").decode()
    receiver = receiver_factory(  # type: ignore[operator]
        Receiver("standard-webhooks", [secret], together=5))
    code = main(["send", "--preset", "standard-webhooks", "--secret", secret, "--url",
                 receiver.url, "--file", str(payload), "--count", "5", "--concurrent"])
    out = capsys.readouterr().out
    assert code == 0, out  # every answer waited until all five were in flight together
    ids = {tuple(event_ids) for event_ids, _ in receiver.seen}
    assert len(receiver.seen) == 5 and len(ids) == 1
    [(generated,)] = ids
    assert generated.startswith("msg_")
    assert len(lines(out)) == 5


def test_a_given_id_header_is_reused_across_runs(
    receiver_factory: object, payload: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = "whsec_" + base64.b64encode(b"send-reuse-test-key-0123456789ab").decode()
    receiver = receiver_factory(Receiver("svix", [secret]))  # type: ignore[operator]
    for _ in range(2):
        assert main(["send", "--preset", "svix", "--secret", secret, "--url", receiver.url,
                     "--file", str(payload), "-H", "svix-id=msg_fixed", "-H", "X-Extra=a=b"]) == 0
    assert [ids for ids, _ in receiver.seen] == [["msg_fixed"], ["msg_fixed"]]
    assert receiver.seen[0][1]["X-Extra"] == "a=b"
    assert "replay=true" in lines(capsys.readouterr().out)[-1]


def test_from_a_config_file_with_the_first_secret(
    receiver_factory: object, tmp_path: Path, payload: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    receiver = receiver_factory(Receiver("slack", ["first-secret"]))  # type: ignore[operator]
    config = tmp_path / "config.yaml"
    config.write_text(
        "upstream: {url: 'http://127.0.0.1:9'}\n"
        f"store: {{url: 'sqlite:///{tmp_path}/db.sqlite'}}\n"
        "providers:\n"
        "  slack:\n    path: /webhooks/slack\n    preset: slack\n"
        "    secrets: [first-secret, second-secret]\n"
    )
    code = main(["send", "--config", str(config), "--provider", "slack", "--url", receiver.url,
                 "--file", str(payload), "--count", "2"])
    assert code == 0, capsys.readouterr().out
    assert [ids for ids, _ in receiver.seen] == [["Ev1"], ["Ev1"]]
    assert main(["send", "--config", str(config), "--provider", "nope", "--url", receiver.url,
                 "--file", str(payload)]) == 2
    assert "no provider 'nope'" in capsys.readouterr().err


def test_public_key_and_body_signed_and_url_signed_schemes(
    receiver_factory: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed = bytes(range(32))
    public = SigningKey(seed).verify_key.encode().hex()
    discord = receiver_factory(Receiver("discord", [public]))  # type: ignore[operator]
    body = tmp_path / "interaction.json"
    body.write_bytes(b'{"id":"99","type":2}')
    assert main(["send", "--preset", "discord", "--secret", seed.hex(), "--url", discord.url,
                 "--file", str(body)]) == 0
    assert [ids for ids, _ in discord.seen] == [["99"]]

    key = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"
    adyen = receiver_factory(Receiver("adyen", [key]))  # type: ignore[operator]
    notification = tmp_path / "adyen.json"
    notification.write_text(json.dumps({"notificationItems": [{"NotificationRequestItem": {
        "pspReference": "P1", "merchantAccountCode": "M", "eventCode": "AUTHORISATION",
        "success": "true", "amount": {"value": 5, "currency": "EUR"}}}]}))
    assert main(["send", "--preset", "adyen", "--secret", key, "--url", adyen.url,
                 "--file", str(notification)]) == 0
    assert [ids for ids, _ in adyen.seen] == [["M:P1:AUTHORISATION:true"]]

    square = receiver_factory(Receiver("square", ["sq-key"]))  # type: ignore[operator]
    event = tmp_path / "square.json"
    event.write_bytes(b'{"event_id":"sq-1"}')
    assert main(["send", "--preset", "square", "--secret", "sq-key", "--url", square.url,
                 "--file", str(event)]) == 0
    assert [ids for ids, _ in square.seen] == [["sq-1"]]
    assert not (discord.rejected or adyen.rejected or square.rejected)
    capsys.readouterr()


def test_failures_exit_1_and_usage_errors_exit_2(
    receiver_factory: object, payload: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    receiver = receiver_factory(Receiver("github", ["right"]))  # type: ignore[operator]
    assert main(["send", "--preset", "github", "--secret", "wrong", "--url", receiver.url,
                 "--file", str(payload)]) == 1
    assert receiver.rejected == ["bad_signature"]
    out = capsys.readouterr().out
    assert "status=401" in out and "sent 1: 0 2xx, 1 other, 0 errors" in out
    assert "reason=bad_signature" in out

    closed = receiver.url.replace(str(receiver.port), "1")
    assert main(["send", "--preset", "github", "--secret", "s", "--url", closed,
                 "--file", str(payload)]) == 1
    assert "status=error (ClientConnectorError" in capsys.readouterr().out

    import io
    import sys

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(PAYLOAD)))
    assert main(["send", "--preset", "github", "--secret", "right", "--url", receiver.url,
                 "--file", "-"]) == 0
    capsys.readouterr()

    for argv in (["--url", receiver.url, "--file", str(payload)],
                 ["--preset", "github", "--url", receiver.url, "--file", str(payload)],
                 ["--preset", "nope", "--secret", "s", "--url", receiver.url, "--file", "x"],
                 ["--preset", "github", "--secret", "s", "--url", receiver.url, "--file",
                  str(payload), "-H", "no-equals"],
                 ["--preset", "github", "--secret", "s", "--url", receiver.url, "--file",
                  str(payload), "--count", "0"],
                 ["--preset", "adyen", "--secret", "00", "--url", receiver.url, "--file",
                  str(payload)]):
        assert main(["send", *argv]) == 2, argv
    assert capsys.readouterr().err.count("config error") == 6


def test_prints_the_event_id_it_used_on_every_line(
    receiver_factory: object, payload: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = "whsec_" + base64.b64encode(b"send-prints-ids-key-0123456789ab").decode()
    receiver = receiver_factory(Receiver("standard-webhooks", [secret]))  # type: ignore[operator]
    assert main(["send", "--preset", "standard-webhooks", "--secret", secret, "--url",
                 receiver.url, "--file", str(payload), "--count", "2"]) == 0
    out = capsys.readouterr().out
    [(generated,)] = {tuple(ids) for ids, _ in receiver.seen}
    assert f"event id: {generated}, in each of 2 copies" in out.splitlines()[0]
    assert [line.split()[-1] for line in lines(out)] == [f"event={generated}"] * 2


def test_prints_every_id_of_a_batch(
    receiver_factory: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"
    adyen = receiver_factory(Receiver("adyen", [key]))  # type: ignore[operator]
    item = {"merchantAccountCode": "M", "eventCode": "AUTHORISATION", "success": "true",
            "amount": {"value": 5, "currency": "EUR"}}
    notification = tmp_path / "adyen.json"
    notification.write_text(json.dumps({"notificationItems": [
        {"NotificationRequestItem": {**item, "pspReference": ref}} for ref in ("P1", "P2")]}))
    assert main(["send", "--preset", "adyen", "--secret", key, "--url", adyen.url,
                 "--file", str(notification)]) == 0
    out = capsys.readouterr().out
    expected = ["M:P1:AUTHORISATION:true", "M:P2:AUTHORISATION:true"]
    assert adyen.seen[0][0] == expected
    assert f"event ids (2): {', '.join(expected)}" in out
    assert lines(out)[0].endswith(f"event={','.join(expected)}")


def test_sets_the_event_type_header_unless_given(
    receiver_factory: object, payload: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    receiver = receiver_factory(Receiver("github", ["gh-secret"]))  # type: ignore[operator]
    base = ["send", "--preset", "github", "--secret", "gh-secret", "--url", receiver.url,
            "--file", str(payload)]
    assert main(base) == 0
    assert main([*base, "-H", "X-GitHub-Event=push"]) == 0
    assert [headers["X-GitHub-Event"] for _, headers in receiver.seen] == ["ping", "push"]
    delivery = receiver.seen[0][1]["X-GitHub-Delivery"]
    assert f"event id: {delivery}" in capsys.readouterr().out

    stripe = receiver_factory(Receiver("stripe", ["whsec_s"]))  # type: ignore[operator]
    assert main(["send", "--preset", "stripe", "--secret", "whsec_s", "--url", stripe.url,
                 "--file", str(payload)]) == 0
    sent = {name.lower() for name in stripe.seen[0][1]}
    assert not sent & {"x-github-event", "x-event-key", "x-gitlab-event"}, "none for Stripe"
    capsys.readouterr()


def test_quiet_prints_only_the_event_ids(
    receiver_factory: object, payload: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = "whsec_quiet"
    receiver = receiver_factory(Receiver("stripe", [secret]))  # type: ignore[operator]
    assert main(["send", "--preset", "stripe", "--secret", secret, "--url", receiver.url,
                 "--file", str(payload), "--count", "3", "--quiet"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "evt_send_1\n" and captured.err == ""
    assert len(receiver.seen) == 3

    assert main(["send", "--preset", "stripe", "--secret", "whsec_wrong", "--url", receiver.url,
                 "--file", str(payload), "-q"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "evt_send_1\n"
    assert "#1 status=401" in captured.err, "a failure is still told, on stderr"


def test_a_non_2xx_answer_says_why() -> None:
    assert refusal(b'{"error": "signature verification failed", "reason": "bad_signature"}') \
        == "reason=bad_signature: signature verification failed"
    assert refusal(b'{"reason": "missing_nonce"}') == "reason=missing_nonce"
    # The app's own answer, relayed: its start, escaped for the terminal.
    assert refusal(b"no such order\x1b[2J") == "answer=no such order\\x1b[2J"
    assert refusal(b"x" * 500) == "answer=" + "x" * 200 + "\u2026"
    assert refusal(b'{"reason": 3}') == 'answer={"reason": 3}'
    assert refusal(b"\xff\xfe") == "answer=\ufffd\ufffd"
    assert refusal(b"") == ""


def _keys(preset: str) -> tuple[str, str]:
    """(what send signs with, what the verifying receiver is configured with) for a preset."""
    whsec = "whsec_" + base64.b64encode(b"sample-sender-key-0123456789abcd").decode()
    if preset in ("standard-webhooks", "svix", "clerk", "resend"):
        return whsec, whsec
    if preset == "adyen":
        key = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"
        return key, key
    if preset == "discord":
        seed = bytes(range(32))
        return seed.hex(), SigningKey(seed).verify_key.encode().hex()
    if preset == "sendgrid":
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        private = ec.generate_private_key(ec.SECP256R1())
        pkcs8 = private.private_bytes(serialization.Encoding.DER,
                                      serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption())
        public = private.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        return base64.b64encode(pkcs8).decode(), base64.b64encode(public).decode()
    return "sample-secret", "sample-secret"


SAMPLES = [(preset, sample.type) for preset in preset_names() for sample in samples_of(preset)]


@pytest.mark.parametrize(("preset", "sample_type"), SAMPLES)
def test_every_sample_verifies_and_carries_the_event_id_where_the_preset_reads_it(
    receiver_factory: object, preset: str, sample_type: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Sent with --sample to a receiver verifying with the preset: it verifies, the event id
    the receiver parses with the preset's rule is the one send printed (from the body where
    the preset reads it there), and the sample's headers (X-GitHub-Event: push) arrive."""
    signing, verifying = _keys(preset)
    receiver = receiver_factory(Receiver(preset, [verifying]))  # type: ignore[operator]
    assert main(["send", "--preset", preset, "--secret", signing, "--url", receiver.url,
                 "--sample", sample_type, "--quiet"]) == 0, receiver.rejected
    printed = capsys.readouterr().out.split()
    [(ids, headers)] = receiver.seen
    assert ids == printed and ids
    sample = find_sample(preset, sample_type)
    for name, value in sample.headers.items():
        assert headers[name] == value
    event_id = parse_event_id_spec(load_preset(preset)["event_id"], "e")
    if event_id.header is None:  # read from the body: the sample itself must carry it
        assert [i.event_id for i in delivery_items(event_id, sample.body(), {})] == ids


def test_sample_choice_list_and_errors(
    receiver_factory: object, payload: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    receiver = receiver_factory(Receiver("github", ["gh"]))  # type: ignore[operator]
    base = ["send", "--preset", "github", "--secret", "gh", "--url", receiver.url]
    assert main(base) == 0  # neither --file nor --sample: the first sample, push
    assert main([*base, "--sample", "pull_request", "-H", "X-GitHub-Event=custom"]) == 0
    assert main([*base, "--file", str(payload)]) == 0  # a file keeps the test event, ping
    assert [h["X-GitHub-Event"] for _, h in receiver.seen] == ["push", "custom", "ping"]
    assert receiver.seen[0][1]["Content-Type"] == "application/json"
    out = capsys.readouterr().out
    assert out.startswith("sample: github push (https://github.com/octokit/webhooks/")

    assert main([*base, "--sample", "nope"]) == 2
    assert capsys.readouterr().err == (
        "webhook-sidecar: config error: --sample: no sample 'nope' for preset 'github'; "
        "available: push, pull_request, ping\n")
    assert main(["send", "--list-samples", "github"]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert listing[0].split() == ["push", "(default)", "X-GitHub-Event:", "push"]
    assert [line.split()[0] for line in listing[::2]] == ["push", "pull_request", "ping"]
    assert all(line.startswith("    source: https://") for line in listing[1::2])
    assert main(["send", "--preset", "stripe", "--list-samples"]) == 0
    assert "invoice.paid" in capsys.readouterr().out
    assert main(["send", "--list-samples", "nope"]) == 2
    assert main(["send", "--list-samples"]) == 2  # no preset named anywhere
    assert main(["send", "--preset", "github", "--secret", "gh"]) == 2  # no --url
    assert capsys.readouterr().err.count("config error") == 3
