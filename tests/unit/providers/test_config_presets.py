"""The new presets through the real config loader: URL-signed presets need `signature.url`,
public keys are checked at start-up, plugins and batch ids load."""

from __future__ import annotations

import base64

import pytest

from sidecar.config.loader import load_config_text
from sidecar.core.errors import ConfigError
from sidecar.core.signing import PluginSpec, PublicKey

SEED_PUBLIC = "03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8"


def config(providers: str) -> str:
    return ("upstream: {url: 'http://127.0.0.1:3000'}\n"
            "store: {url: 'sqlite:////tmp/unused.db'}\n"
            f"providers:\n{providers}")


def test_every_new_kind_of_preset_loads() -> None:
    text = config(
        "  square:\n    path: /sq\n    preset: square\n    secrets: [k]\n"
        "    signature: {url: '${PUBLIC_URL}/webhooks/square'}\n"
        "  twilio:\n    path: /tw\n    preset: twilio\n    secrets: [tok]\n"
        "    signature: {url: '${PUBLIC_URL}/webhooks/twilio', algorithm: hmac-sha256}\n"
        "  discord:\n    path: /dc\n    preset: discord\n"
        f"    secrets: ['{SEED_PUBLIC}']\n"
        "  sw:\n    path: /sw\n    preset: standard-webhooks\n"
        f"    secrets: [whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw, "
        f"'whpk_{base64.b64encode(bytes.fromhex(SEED_PUBLIC)).decode()}']\n"
        "  adyen:\n    path: /ad\n    preset: adyen\n    secrets: ['" + "ab" * 32 + "']\n"
    )
    loaded = {p.key: p for p in load_config_text(text, env={"PUBLIC_URL": "https://h.example"})
              .providers}
    square = loaded["square"].signature
    assert not isinstance(square, PluginSpec) and square.url == "https://h.example/webhooks/square"
    twilio = loaded["twilio"].signature
    assert isinstance(twilio, PluginSpec) and twilio.plugin == "twilio"
    assert isinstance(loaded["discord"].key_bytes[0], PublicKey)
    assert [isinstance(k, PublicKey) for k in loaded["sw"].key_bytes] == [False, True]
    assert loaded["adyen"].key_bytes == (bytes.fromhex("ab" * 32),)
    assert loaded["adyen"].event_id.is_batch


@pytest.mark.parametrize(
    "block, path",
    [
        ("  square:\n    path: /sq\n    preset: square\n    secrets: [k]\n",
         "providers.square.signature.url"),
        ("  hubspot:\n    path: /hs\n    preset: hubspot\n    secrets: [k]\n"
         "    signature: {url: '/webhooks/hubspot'}\n", "providers.hubspot.signature.url"),
        ("  discord:\n    path: /dc\n    preset: discord\n    secrets: [abcd]\n",
         "providers.discord.secrets[0]"),
        ("  sendgrid:\n    path: /sg\n    preset: sendgrid\n    secrets: [bm90IGEga2V5]\n",
         "providers.sendgrid.secrets[0]"),
        ("  github:\n    path: /gh\n    preset: github\n    secrets: [k]\n"
         "    signature: {url: 'https://h/x'}\n", "providers.github.signature.url"),
    ],
)
def test_preset_errors_name_the_key(block: str, path: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config_text(config(block), env={})
    assert caught.value.path == path
