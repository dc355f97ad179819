"""Published test vectors (providers.md §3) verify through the shipped presets."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from sidecar.config.presets import load_preset
from sidecar.core.errors import VerificationError
from sidecar.core.signing import (
    Delivery,
    SignatureSpec,
    decode_secret,
    parse_signature_spec,
    verify,
)


def preset_spec(name: str) -> SignatureSpec:
    return parse_signature_spec(load_preset(name)["signature"], f"presets.{name}.signature")


def reason(spec: SignatureSpec, keys: list[bytes], body: bytes, headers: dict[str, str],
           now: float) -> str:
    with pytest.raises(VerificationError) as caught:
        verify(spec, keys, Delivery(body, headers), now)
    return caught.value.reason


# --- GitHub (§3.1, github/docs validating-webhook-deliveries.md) ---------------------------

GITHUB_SECRET = "It's a Secret to Everybody"
GITHUB_BODY = b"Hello, World!"
GITHUB_SIG = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"


def github() -> tuple[SignatureSpec, list[bytes]]:
    spec = preset_spec("github")
    return spec, [decode_secret(spec, GITHUB_SECRET, "secrets[0]")]


@pytest.mark.parametrize("name", ["X-Hub-Signature-256", "x-hub-signature-256"])
def test_github_vector_verifies_whatever_the_header_case(name: str) -> None:
    spec, keys = github()
    verify(spec, keys, Delivery(GITHUB_BODY, {name: GITHUB_SIG}), now=0.0)


def test_github_vector_hex_is_compared_as_bytes_so_upper_case_verifies() -> None:
    spec, keys = github()
    upper = {"X-Hub-Signature-256": "sha256=" + GITHUB_SIG[7:].upper()}
    verify(spec, keys, Delivery(GITHUB_BODY, upper), 0)


def test_github_vector_fails_on_a_changed_body_byte() -> None:
    spec, keys = github()
    headers = {"X-Hub-Signature-256": GITHUB_SIG}
    assert reason(spec, keys, b"Hello, World?", headers, 0) == "bad_signature"


def test_github_vector_fails_on_a_changed_signature_byte() -> None:
    spec, keys = github()
    headers = {"X-Hub-Signature-256": GITHUB_SIG[:-1] + "f"}
    assert reason(spec, keys, GITHUB_BODY, headers, 0) == "bad_signature"


def test_github_vector_fails_with_another_secret() -> None:
    spec, _ = github()
    keys = [decode_secret(spec, "It's a secret to everybody", "s")]
    assert reason(spec, keys, GITHUB_BODY, {"X-Hub-Signature-256": GITHUB_SIG}, 0) == (
        "bad_signature"
    )


def test_github_without_the_prefix_is_malformed() -> None:
    spec, keys = github()
    headers = {"X-Hub-Signature-256": GITHUB_SIG.removeprefix("sha256=")}
    assert reason(spec, keys, GITHUB_BODY, headers, 0) == "malformed_signature"


def test_github_without_the_header_is_missing() -> None:
    spec, keys = github()
    assert reason(spec, keys, GITHUB_BODY, {"X-Hub-Signature": "sha1=00"}, 0) == (
        "missing_signature"
    )


# --- Slack (§3.2, docs.slack.dev verifying-requests-from-slack) -----------------------------

SLACK_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
SLACK_TS = 1531420618
SLACK_BODY = (
    b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow"
    b"&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner"
    b"&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands"
    b"%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN"
    b"&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
)
SLACK_SIG = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"


def slack() -> tuple[SignatureSpec, list[bytes], dict[str, str]]:
    spec = preset_spec("slack")
    headers = {"X-Slack-Signature": SLACK_SIG, "X-Slack-Request-Timestamp": str(SLACK_TS)}
    return spec, [decode_secret(spec, SLACK_SECRET, "s")], headers


@pytest.mark.parametrize("delta", [0, 7, -7, 300, -300])
def test_slack_vector_verifies_within_five_minutes(delta: int) -> None:
    spec, keys, headers = slack()
    verify(spec, keys, Delivery(SLACK_BODY, headers), now=SLACK_TS + delta)


def test_slack_vector_too_old_is_stale() -> None:
    spec, keys, headers = slack()
    assert reason(spec, keys, SLACK_BODY, headers, SLACK_TS + 301) == "stale_timestamp"


def test_slack_vector_from_the_future_is_rejected_both_ways() -> None:
    spec, keys, headers = slack()
    assert reason(spec, keys, SLACK_BODY, headers, SLACK_TS - 301) == "future_timestamp"


def test_slack_vector_fails_on_a_changed_timestamp() -> None:
    spec, keys, headers = slack()
    headers["X-Slack-Request-Timestamp"] = str(SLACK_TS + 1)  # still fresh, but not signed
    assert reason(spec, keys, SLACK_BODY, headers, SLACK_TS) == "bad_signature"


def test_slack_vector_fails_on_a_changed_body_byte() -> None:
    spec, keys, headers = slack()
    body = SLACK_BODY.replace(b"foobar", b"foobaz")
    assert reason(spec, keys, body, headers, SLACK_TS) == "bad_signature"


def test_slack_vector_without_the_timestamp_header() -> None:
    spec, keys, headers = slack()
    del headers["X-Slack-Request-Timestamp"]
    assert reason(spec, keys, SLACK_BODY, headers, SLACK_TS) == "missing_timestamp"


@pytest.mark.parametrize(
    "text", ["1531420618.0", "+1531420618", " 1531420618", "abc", "\uff11\uff12", "1_531_420_618"]
)
def test_slack_timestamp_must_be_plain_ascii_digits(text: str) -> None:
    spec, keys, headers = slack()
    headers["X-Slack-Request-Timestamp"] = text
    assert reason(spec, keys, SLACK_BODY, headers, SLACK_TS) == "bad_timestamp"


# --- Standard Webhooks / Svix (§3.3, standard-webhooks tests/test_webhooks.py) --------------

SW_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SW_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
SW_TS = 1614265330
SW_BODY = b'{"test": 2432232314}'
SW_SIG = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


@pytest.mark.parametrize("preset, prefix", [("standard-webhooks", "webhook"), ("svix", "svix")])
def test_standard_webhooks_vector_verifies(preset: str, prefix: str) -> None:
    spec = preset_spec(preset)
    keys = [decode_secret(spec, SW_SECRET, "s")]
    headers = {f"{prefix}-id": SW_ID, f"{prefix}-timestamp": str(SW_TS),
               f"{prefix}-signature": SW_SIG}
    verify(spec, keys, Delivery(SW_BODY, headers), now=SW_TS + 3)


def sw_headers(signature: str = SW_SIG, msg_id: str = SW_ID) -> dict[str, str]:
    return {"webhook-id": msg_id, "webhook-timestamp": str(SW_TS), "webhook-signature": signature}


def sw() -> tuple[SignatureSpec, list[bytes]]:
    spec = preset_spec("standard-webhooks")
    return spec, [decode_secret(spec, SW_SECRET, "s")]


@pytest.mark.parametrize(
    "signature",
    [
        f"v1,Zm9vYmFy {SW_SIG}",  # a bogus v1 first (rotation: another key's signature)
        f"v1a,hnO3f9T8Ytu9HwrXslvumlUpqtNVqkhqw/enGzPCXe5BdqzCInXqYXFymVJaA7AZdpXwVLPo3mNl8EM+m7TBAg== {SW_SIG}",  # noqa: E501
        f"v1,not-base64! {SW_SIG} v2,whatever",
        SW_SIG.rstrip("="),  # unpadded base64 is accepted
    ],
)
def test_standard_webhooks_any_valid_entry_suffices(signature: str) -> None:
    spec, keys = sw()
    verify(spec, keys, Delivery(SW_BODY, sw_headers(signature)), now=SW_TS)


def test_standard_webhooks_only_accepted_versions_count() -> None:
    spec, keys = sw()
    headers = sw_headers(SW_SIG.replace("v1,", "v2,"))
    assert reason(spec, keys, SW_BODY, headers, SW_TS) == "malformed_signature"


def test_standard_webhooks_id_is_signed() -> None:
    spec, keys = sw()
    headers = sw_headers(msg_id=SW_ID[:-1] + "l")
    assert reason(spec, keys, SW_BODY, headers, SW_TS) == "bad_signature"


def test_standard_webhooks_without_the_id_header() -> None:
    spec, keys = sw()
    headers = sw_headers()
    del headers["webhook-id"]
    assert reason(spec, keys, SW_BODY, headers, SW_TS) == "missing_header"


def test_standard_webhooks_too_new_and_too_old() -> None:
    spec, keys = sw()
    assert reason(spec, keys, SW_BODY, sw_headers(), SW_TS - 301) == "future_timestamp"
    assert reason(spec, keys, SW_BODY, sw_headers(), SW_TS + 301) == "stale_timestamp"


def test_standard_webhooks_vector_fails_with_the_key_not_base64_decoded() -> None:
    # The trap of §6.1: using "whsec_…" verbatim (Stripe's way) must not verify here.
    spec, _ = sw()
    assert reason(spec, [SW_SECRET.encode()], SW_BODY, sw_headers(), SW_TS) == "bad_signature"


# --- HMAC-SHA1 (Intercom-style `X-Hub-Signature: sha1=…`), against a stdlib HMAC ------------


def test_hmac_sha1_plain_prefix() -> None:
    spec = parse_signature_spec(
        {"algorithm": "hmac-sha1", "header": "X-Hub-Signature", "encoding": "hex",
         "format": {"type": "plain", "prefix": "sha1="}, "message": "{body}"},
        "providers.intercom.signature",
    )
    expected = hmac.new(b"client-secret", GITHUB_BODY, hashlib.sha1).hexdigest()
    headers = {"X-Hub-Signature": f"sha1={expected}"}
    verify(spec, [b"client-secret"], Delivery(GITHUB_BODY, headers), 0)
    assert reason(spec, [b"client-secret"], GITHUB_BODY + b"!", headers, 0) == "bad_signature"
    sha256 = hmac.new(b"client-secret", GITHUB_BODY, hashlib.sha256).hexdigest()
    assert reason(spec, [b"client-secret"], GITHUB_BODY, {"X-Hub-Signature": f"sha1={sha256}"},
                  0) == "bad_signature"
