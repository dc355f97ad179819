"""Every shipped preset is data in the user's schema, and its numbers fit the provider's facts."""

from __future__ import annotations

import pytest

from sidecar.config.presets import load_preset, preset_names
from sidecar.core.durations import parse_duration
from sidecar.core.errors import ConfigError
from sidecar.core.eventid import parse_event_id_spec
from sidecar.core.filter_config import parse_event_type_spec
from sidecar.core.signing import parse_signature_spec

EXPECTED = [
    "adyen", "bitbucket", "clerk", "discord", "github", "gitlab", "hubspot", "intercom",
    "lemonsqueezy", "linear", "mailgun", "mollie", "paddle", "razorpay", "resend", "sendgrid",
    "shopify", "slack", "square", "standard-webhooks", "stripe", "svix", "twilio", "twitch",
    "workos", "zoom",
]
# URL-signed schemes: the public URL can only come from the user's config.
NEEDS_URL = {"square", "hubspot", "twilio"}
ALLOWED_KEYS = {"description", "signature", "event_id", "retention", "inflight_wait", "lease",
                "handshake", "retry_window", "replay_nonce", "retries", "event_type"}
# No event type in the preset: Discord's app answers the interaction itself (a filter's 200
# would be no interaction response); Svix carries any payload its sender chooses; Twilio
# posts forms whose fields depend on the product.
WITHOUT_EVENT_TYPE = {"discord", "svix", "twilio"}

# providers.md §0/§1/§2: (window in which the same event can arrive again, delivery timeout),
# in seconds; None where unpublished. GitHub has no automatic retries but allows manual
# redelivery for about 30 days; GitLab resends by hand; Discord does not retry at all.
HOUR, DAY = 3600, 86400
FACTS = {
    "clerk": (27 * HOUR + 35 * 60, 15),
    "resend": (27 * HOUR + 35 * 60, 15),
    "square": (72 * HOUR, 10),
    "paddle": (3 * DAY, 5),
    "workos": (3 * DAY, None),
    "zoom": (85 * 60, 3),
    "twitch": (DAY, 3),
    "hubspot": (DAY, 5),
    "linear": (7 * HOUR + 1 * 60, 5),
    "intercom": (HOUR, 5),
    "bitbucket": (DAY, 10),
    "lemonsqueezy": (155, None),
    "razorpay": (7 * DAY, None),  # 24 h of retries, dashboard replays of the last 7 days
    "mollie": (26 * HOUR, 15),
    "gitlab": (DAY, 10),
    "discord": (0, 3),
    "sendgrid": (DAY, None),
    "twilio": (HOUR, 15),
    "adyen": (30 * DAY, 10),
    "mailgun": (8 * HOUR, None),
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
    signature = data["signature"]
    assert isinstance(signature, dict)
    if name in NEEDS_URL:
        with pytest.raises(ConfigError) as caught:
            parse_signature_spec(signature, f"presets.{name}.signature")
        assert caught.value.path == f"presets.{name}.signature.url"
        signature["url"] = "https://hooks.example.com/webhooks/x"
    parse_signature_spec(signature, f"presets.{name}.signature")
    parse_event_id_spec(data["event_id"], f"presets.{name}.event_id")
    assert ("event_type" not in data) is (name in WITHOUT_EVENT_TYPE)
    if "event_type" in data:
        parse_event_type_spec(data["event_type"], f"presets.{name}.event_type")
    retry_window, timeout = FACTS[name]
    retention = parse_duration(data["retention"], f"presets.{name}.retention")
    assert retention >= retry_window  # a redelivery inside the window is still recognised
    if "retry_window" in data:  # what check-config compares a user's retention with
        declared = parse_duration(data["retry_window"], f"presets.{name}.retry_window")
        assert retry_window <= declared <= retention
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
    assert load_preset("shopify")["event_id"] == {"header": ["X-Shopify-Webhook-Id",
                                                            "shopify-webhook-id"]}


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
    assert f"unknown preset {name!r}; known: adyen, bitbucket" in caught.value.message


# providers.md: GitHub and GitLab do not retry (manual redelivery only), Discord not at all;
# every other preset's provider retries a delivery not answered 2xx.
DO_NOT_RETRY = {"github", "gitlab", "discord"}


@pytest.mark.parametrize("name", preset_names())
def test_a_preset_says_whether_its_provider_retries(name: str) -> None:
    assert load_preset(name).get("retries", True) is (name not in DO_NOT_RETRY)
