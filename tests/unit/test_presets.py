"""Every shipped preset is data in the user's schema, and its numbers fit the provider's facts."""

from __future__ import annotations

import pytest

from sidecar.config.presets import load_preset, preset_names
from sidecar.core.durations import parse_duration
from sidecar.core.errors import ConfigError
from sidecar.core.eventid import parse_event_id_spec
from sidecar.core.signing import parse_signature_spec

EXPECTED = ["github", "shopify", "slack", "standard-webhooks", "stripe", "svix"]
ALLOWED_KEYS = {"description", "signature", "event_id", "retention", "inflight_wait", "lease",
                "handshake"}

# providers.md §0/§1: (window in which the same event can arrive again, delivery timeout), in
# seconds. GitHub has no automatic retries but allows manual redelivery for about 30 days.
FACTS = {
    "stripe": (3 * 86400, None),
    "github": (30 * 86400, 10),
    "shopify": (4 * 3600, 5),
    "slack": (6 * 60, 3),
    "standard-webhooks": (27 * 3600 + 35 * 60, 15),
    "svix": (27 * 3600 + 35 * 60, 15),
}


def test_preset_names() -> None:
    assert preset_names() == EXPECTED


@pytest.mark.parametrize("name", EXPECTED)
def test_preset_parses(name: str) -> None:
    data = load_preset(name)
    assert set(data) <= ALLOWED_KEYS
    assert {"description", "signature", "event_id", "retention", "inflight_wait"} <= set(data)
    assert isinstance(data["description"], str) and data["description"]
    parse_signature_spec(data["signature"], f"presets.{name}.signature")
    parse_event_id_spec(data["event_id"], f"presets.{name}.event_id")
    retry_window, timeout = FACTS[name]
    retention = parse_duration(data["retention"], f"presets.{name}.retention")
    assert retention >= retry_window  # a redelivery inside the window is still recognised
    inflight_wait = parse_duration(data["inflight_wait"], f"presets.{name}.inflight_wait")
    assert 0 < inflight_wait < (timeout or 10)  # answered before the provider gives up
    if "lease" in data:
        parse_duration(data["lease"], f"presets.{name}.lease")


def test_scheme_facts_that_are_easy_to_get_wrong() -> None:
    stripe = parse_signature_spec(load_preset("stripe")["signature"], "s")
    assert stripe.secret.encoding == "utf8" and not stripe.secret.strip_prefix  # §6.1
    sw = parse_signature_spec(load_preset("standard-webhooks")["signature"], "s")
    assert (sw.secret.encoding, sw.secret.strip_prefix) == ("base64", "whsec_")
    github = parse_signature_spec(load_preset("github")["signature"], "s")
    shopify = parse_signature_spec(load_preset("shopify")["signature"], "s")
    assert (github.encoding.name, shopify.encoding.name) == ("hex", "base64")  # §6.2
    assert github.timestamp is None and shopify.timestamp is None
    assert load_preset("shopify")["event_id"] == {"header": "X-Shopify-Webhook-Id"}


def test_slack_handshake_shape() -> None:
    assert load_preset("slack")["handshake"] == {
        "when": {"json": "$.type", "equals": "url_verification"},
        "respond": {"json": {"challenge": "$.challenge"}},
    }


def test_load_preset_returns_a_fresh_copy() -> None:
    first = load_preset("stripe")
    signature = first["signature"]
    assert isinstance(signature, dict)
    signature["header"] = "Changed"
    first["retention"] = "1s"
    again = load_preset("stripe")
    assert again["retention"] == "30d"
    assert isinstance(again["signature"], dict) and again["signature"]["header"] == (
        "Stripe-Signature"
    )


@pytest.mark.parametrize("name", ["acme", "../presets/stripe", "stripe.yaml", "Stripe", ""])
def test_unknown_preset(name: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_preset(name)
    assert caught.value.path == ""
    assert f"unknown preset {name!r}; known: github, shopify" in caught.value.message
