"""Public-key presets: Discord (Ed25519, hex), Standard Webhooks ``v1a`` (Ed25519, base64,
``whpk_`` keys) and SendGrid (ECDSA P-256, DER signatures, base64 SPKI key).

Oracles: PyNaCl signs Ed25519, ``cryptography`` signs ECDSA, SendGrid's published vector, and
the SDK verifiers (``discord_interactions``, ``sendgrid.EventWebhook``) must accept what our
``sign`` produces from a private key."""

from __future__ import annotations

import base64
import hashlib
import hmac

import discord_interactions
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from nacl.signing import SigningKey, VerifyKey
from sendgrid.helpers.eventwebhook import EventWebhook

from sidecar.core.errors import ConfigError
from sidecar.core.signing import (
    Delivery,
    PrivateKey,
    PublicKey,
    decode_secret,
    decode_signing_key,
    parse_signature_spec,
    sign,
    verify,
)

from .helpers import NOW, assert_tampering_fails, keys_for, preset_spec, reason

BODY = b'{"id":"1234567890123456789","type":2,"data":{"name":"ping"}}'
SEED = bytes(range(32))
SEED_2 = bytes(range(32, 64))


# --- Discord ---------------------------------------------------------------------------------


def discord_headers(seed: bytes, timestamp: int = NOW, body: bytes = BODY) -> dict[str, str]:
    signature = SigningKey(seed).sign(str(timestamp).encode() + body).signature
    return {"X-Signature-Ed25519": signature.hex(), "X-Signature-Timestamp": str(timestamp)}


def discord_public(seed: bytes) -> str:
    return SigningKey(seed).verify_key.encode().hex()


def test_discord_signed_by_pynacl() -> None:
    spec = preset_spec("discord")
    keys = keys_for(spec, discord_public(SEED))
    assert all(isinstance(key, PublicKey) for key in keys)
    headers = discord_headers(SEED)
    assert_tampering_fails(spec, keys, keys_for(spec, discord_public(SEED_2)), BODY, headers,
                           signature_header="X-Signature-Ed25519",
                           timestamp_header="X-Signature-Timestamp")
    # Rotation: two application keys configured, either signs.
    both = keys_for(spec, discord_public(SEED_2), discord_public(SEED))
    verify(spec, both, Delivery(BODY, headers), NOW)
    verify(spec, both, Delivery(BODY, discord_headers(SEED_2)), NOW)
    assert reason(spec, keys, BODY, headers, NOW + 301) == "stale_timestamp"
    assert reason(spec, keys, BODY, {**headers, "X-Signature-Ed25519": "zz"}) == "bad_signature"
    assert reason(spec, keys, BODY, {**headers, "X-Signature-Ed25519": "00" * 63}) == (
        "bad_signature"
    )


def test_discord_sdk_accepts_our_signature() -> None:
    spec = preset_spec("discord")
    key = decode_signing_key(spec, SEED.hex(), "--secret")
    assert isinstance(key, PrivateKey)
    added = sign(spec, key, Delivery(BODY, {}), NOW)
    assert added == discord_headers(SEED)  # Ed25519 is deterministic: identical to PyNaCl's
    assert discord_interactions.verify_key(BODY, added["X-Signature-Ed25519"],
                                           added["X-Signature-Timestamp"], discord_public(SEED))


def test_discord_public_key_is_validated_at_config_time() -> None:
    spec = preset_spec("discord")
    for bad, message in (("abcd", "public key"), ("zz" * 32, "valid hex"), ("", "empty")):
        with pytest.raises(ConfigError) as caught:
            decode_secret(spec, bad, "providers.discord.secrets[0]")
        assert caught.value.path == "providers.discord.secrets[0]"
        assert message in caught.value.message


# --- Standard Webhooks v1a -------------------------------------------------------------------

MSG_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
HMAC_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def whpk(seed: bytes) -> str:
    return "whpk_" + base64.b64encode(SigningKey(seed).verify_key.encode()).decode()


def v1a(seed: bytes, timestamp: int = NOW, body: bytes = BODY) -> str:
    signed = SigningKey(seed).sign(f"{MSG_ID}.{timestamp}.".encode() + body).signature
    return "v1a," + base64.b64encode(signed).decode()


def sw_headers(signature: str, timestamp: int = NOW) -> dict[str, str]:
    return {"webhook-id": MSG_ID, "webhook-timestamp": str(timestamp),
            "webhook-signature": signature}


def test_standard_webhooks_v1a_signed_by_pynacl() -> None:
    spec = preset_spec("standard-webhooks")
    keys = keys_for(spec, whpk(SEED))
    headers = sw_headers(v1a(SEED))
    assert_tampering_fails(spec, keys, keys_for(spec, whpk(SEED_2)), BODY, headers,
                           signature_header="webhook-signature",
                           timestamp_header="webhook-timestamp")
    # One header carrying both kinds (a sender migrating); unknown versions are ignored.
    v1 = "v1," + base64.b64encode(hmac.new(
        base64.b64decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
        f"{MSG_ID}.{NOW}.".encode() + BODY, hashlib.sha256).digest()).decode()
    mixed = sw_headers(f"v2,abc {v1} {v1a(SEED)}")
    verify(spec, keys, Delivery(BODY, mixed), NOW)
    verify(spec, keys_for(spec, HMAC_SECRET), Delivery(BODY, mixed), NOW)
    both = keys_for(spec, HMAC_SECRET, whpk(SEED_2))
    verify(spec, both, Delivery(BODY, sw_headers(v1)), NOW)
    verify(spec, both, Delivery(BODY, sw_headers(v1a(SEED_2))), NOW)


def test_a_public_key_never_verifies_an_hmac_signature() -> None:
    """Anyone knows a public key: if it could key the v1 HMAC, anyone could forge v1."""
    spec = preset_spec("standard-webhooks")
    public = whpk(SEED)
    [key] = keys_for(spec, public)
    forged = "v1," + base64.b64encode(hmac.new(
        bytes(key), f"{MSG_ID}.{NOW}.".encode() + BODY, hashlib.sha256).digest()).decode()
    assert reason(spec, [key], BODY, sw_headers(forged)) == "bad_signature"
    # Nor does an untyped copy of those bytes verify v1a in a scheme that also has secrets.
    assert reason(spec, [bytes(key)], BODY, sw_headers(v1a(SEED))) == "bad_signature"
    # And a shared secret never verifies v1a (it is not a public key).
    assert reason(spec, keys_for(spec, HMAC_SECRET), BODY, sw_headers(v1a(SEED))) == (
        "bad_signature"
    )


def test_standard_webhooks_key_prefixes() -> None:
    spec = preset_spec("standard-webhooks")
    with pytest.raises(ConfigError, match="private key"):
        decode_secret(spec, "whsk_" + base64.b64encode(SEED).decode(), "s[0]")
    with pytest.raises(ConfigError, match="ed25519 public key"):
        decode_secret(spec, "whpk_" + base64.b64encode(b"short").decode(), "s[0]")
    signing = decode_signing_key(spec, "whsk_" + base64.b64encode(SEED).decode(), "--secret")
    assert isinstance(signing, PrivateKey)
    added = sign(spec, signing, Delivery(BODY, {"webhook-id": MSG_ID}), NOW)
    assert added["webhook-signature"] == v1a(SEED)
    VerifyKey(SigningKey(SEED).verify_key.encode()).verify(
        f"{MSG_ID}.{NOW}.".encode() + BODY, base64.b64decode(added["webhook-signature"][4:])
    )
    # A 64-byte NaCl secret key (seed + public) signs the same.
    nacl_secret = SEED + SigningKey(SEED).verify_key.encode()
    wide = decode_signing_key(spec, "whsk_" + base64.b64encode(nacl_secret).decode(), "k")
    assert sign(spec, wide, Delivery(BODY, {"webhook-id": MSG_ID}), NOW) == added
    # A whsec_ key still signs v1 with HMAC.
    hmac_key = decode_signing_key(spec, HMAC_SECRET, "--secret")
    assert sign(spec, hmac_key, Delivery(BODY, {"webhook-id": MSG_ID}), NOW)[
        "webhook-signature"].startswith("v1,")


def test_mixed_scheme_without_a_public_key_prefix_is_rejected() -> None:
    data = {
        "algorithm": "hmac-sha256", "header": "sig", "encoding": "base64", "message": "{body}",
        "format": {"type": "versioned_list", "versions": ["v1", "v1a"],
                   "algorithms": {"v1a": "ed25519"}},
    }
    with pytest.raises(ConfigError) as caught:
        parse_signature_spec(data, "p.signature")
    assert caught.value.path == "p.signature.secret.public_key_prefix"
    bad_version = {**data, "format": {**data["format"], "algorithms": {"v2": "ed25519"}}}
    with pytest.raises(ConfigError) as caught:
        parse_signature_spec(bad_version, "p.signature")
    assert caught.value.path == "p.signature.format.algorithms.v2"


# --- SendGrid --------------------------------------------------------------------------------

SG_KEY = ("MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE83T4O/n84iotIvIW4mdBgQ/7dAfSmpqIM8kF9mN1flpVKS3G"
          "Rqe62gw+2fNNRaINXvVpiglSI8eNEc6wEA3F+g==")
SG_BAD_KEY = ("MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEqTxd43gyp8IOEto2LdIfjRQrIbsd4SXZkLW6jDutdhXSJCW"
              "Hw8REntlo7aNDthvj+y7GjUuFDb/R1NGe1OPzpA==")
SG_TIMESTAMP = "1600112502"
SG_BODY = (
    b'[{"email":"hello@world.com","event":"dropped","reason":"Bounced Address","sg_event_id":'
    b'"ZHJvcC0xMDk5NDkxOS1MUnpYbF9OSFN0T0doUTRrb2ZTbV9BLTA","sg_message_id":'
    b'"LRzXl_NHStOGhQ4kofSm_A.filterdrecv-p3mdw1-756b745b58-kmzbl-18-5F5FC76C-9.0","smtp-id":'
    b'"<LRzXl_NHStOGhQ4kofSm_A@ismtpd0039p1iad1.sendgrid.net>","timestamp":1600112492}]\r\n'
)
SG_SIGNATURE = ("MEUCIGHQVtGj+Y3LkG9fLcxf3qfI10QysgDWmMOVmxG0u6ZUAiEAyBiXDWzM+uOe5W0JuG+luQAb"
                "PIqHh89M15TluLtEZtM=")
SG_BAD_SIGNATURE = ("MEUCIQCtIHJeH93Y+qpYeWrySphQgpNGNr/U+UyUlBkU6n7RAwIgJTz2C+8a8xonZGi6BpSzoQ"
                    "sbVRamr2nlxFDWYNH3j/0=")


def sg_headers(signature: str, timestamp: str = SG_TIMESTAMP) -> dict[str, str]:
    return {"X-Twilio-Email-Event-Webhook-Signature": signature,
            "X-Twilio-Email-Event-Webhook-Timestamp": timestamp}


SG_NOW = int(SG_TIMESTAMP) + 60  # the vector's clock: the preset bounds the signed timestamp


def test_sendgrid_published_vector() -> None:
    spec = preset_spec("sendgrid")
    keys = keys_for(spec, SG_KEY)
    verify(spec, keys, Delivery(SG_BODY, sg_headers(SG_SIGNATURE)), SG_NOW)
    assert reason(spec, keys_for(spec, SG_BAD_KEY), SG_BODY, sg_headers(SG_SIGNATURE),
                  SG_NOW) == "bad_signature"
    assert reason(spec, keys, SG_BODY, sg_headers(SG_BAD_SIGNATURE), SG_NOW) == "bad_signature"
    assert reason(spec, keys, SG_BODY.rstrip(b"\r\n"), sg_headers(SG_SIGNATURE),
                  SG_NOW) == "bad_signature"  # the CR LF is signed
    assert reason(spec, keys, SG_BODY, sg_headers(SG_SIGNATURE, "1600112503"),
                  SG_NOW) == "bad_signature"
    both = keys_for(spec, SG_BAD_KEY, SG_KEY)
    verify(spec, both, Delivery(SG_BODY, sg_headers(SG_SIGNATURE)), SG_NOW)
    # The signed timestamp is bounded (2 days, past only): a captured batch cannot come back
    # after its rows are deleted.
    assert reason(spec, keys, SG_BODY, sg_headers(SG_SIGNATURE),
                  int(SG_TIMESTAMP) + 3 * 86400) == "stale_timestamp"


def _p256() -> tuple[ec.EllipticCurvePrivateKey, str, str]:
    private = ec.generate_private_key(ec.SECP256R1())
    spki = private.public_key().public_bytes(serialization.Encoding.DER,
                                             serialization.PublicFormat.SubjectPublicKeyInfo)
    pkcs8 = private.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption())
    return private, base64.b64encode(spki).decode(), base64.b64encode(pkcs8).decode()


def test_sendgrid_signed_by_cryptography_and_sdk_accepts_ours() -> None:
    spec = preset_spec("sendgrid")
    private, public_b64, private_b64 = _p256()
    _, other_public, _ = _p256()
    body = SG_BODY.replace(b"dropped", b"delivered")
    der = private.sign(SG_TIMESTAMP.encode() + body, ec.ECDSA(hashes.SHA256()))
    headers = sg_headers(base64.b64encode(der).decode())
    assert_tampering_fails(spec, keys_for(spec, public_b64), keys_for(spec, other_public), body,
                           headers, signature_header="X-Twilio-Email-Event-Webhook-Signature",
                           timestamp_header="X-Twilio-Email-Event-Webhook-Timestamp",
                           now=SG_NOW)
    verify(spec, keys_for(spec, other_public, public_b64), Delivery(body, headers), SG_NOW)

    key = decode_signing_key(spec, private_b64, "--secret")
    added = sign(spec, key, Delivery(body, {}), NOW)
    stamp = added["X-Twilio-Email-Event-Webhook-Timestamp"]
    assert stamp == str(NOW)
    webhook = EventWebhook()
    public = webhook.convert_public_key_to_ecdsa(public_b64)
    assert webhook.verify_signature(body.decode(), added["X-Twilio-Email-Event-Webhook-Signature"],
                                    stamp, public)
    assert not webhook.verify_signature(body.decode() + " ",
                                        added["X-Twilio-Email-Event-Webhook-Signature"],
                                        stamp, public)


def test_sendgrid_keys_are_checked() -> None:
    spec = preset_spec("sendgrid")
    ed25519_spki = base64.b64encode(bytes.fromhex("302a300506032b6570032100") + SEED).decode()
    for bad in ("bm90IGEga2V5", ed25519_spki):
        with pytest.raises(ConfigError, match="ecdsa-p256-sha256 public key"):
            decode_secret(spec, bad, "s[0]")
    with pytest.raises(ConfigError, match="private key"):
        decode_signing_key(spec, SG_KEY, "--secret")  # a public key cannot sign


def test_a_bare_public_key_is_never_taken_for_a_shared_secret() -> None:
    """In Standard Webhooks a value without whsec_/whpk_ is refused: a public key pasted without
    its prefix would otherwise become an HMAC secret that anyone holding it could sign with."""
    spec = preset_spec("standard-webhooks")
    public = base64.b64encode(SigningKey(SEED).verify_key.encode()).decode()
    with pytest.raises(ConfigError, match="must start with 'whsec_'"):
        decode_secret(spec, public, "s[0]")
    assert isinstance(decode_secret(spec, "whpk_" + public, "s[0]"), PublicKey)
