"""Which providers the body-replay guard protects by default: those whose event id is a header
the signature does not cover. The list is derived from each preset's own declarations and must
match what docs/providers.md promises."""

from __future__ import annotations

import re

import pytest

from sidecar.config.loader import parse_config
from sidecar.config.model import ProviderConfig
from sidecar.config.presets import preset_names
from sidecar.core.bodyreplay import unsigned_id_headers
from tests.support import REPO, base_config
from tests.unit.providers.helpers import preset_event_id, preset_spec

GUARDED = {"bitbucket", "github", "gitlab", "linear", "razorpay", "shopify", "twilio"}


@pytest.mark.parametrize("preset", preset_names())
def test_guarded_by_default_exactly_where_the_id_is_an_unsigned_header(preset: str) -> None:
    unsigned = unsigned_id_headers(preset_spec(preset), preset_event_id(preset))
    assert bool(unsigned) is (preset in GUARDED), unsigned


def provider(key: str, **block: object) -> ProviderConfig:
    data = base_config("http://127.0.0.1:9", "sqlite:///unused.db")
    data["providers"][key].update(block)
    found = parse_config(data, env={}).provider(key)
    assert found is not None
    return found


def test_the_default_follows_the_preset_and_the_policy_overrides_it_both_ways() -> None:
    assert provider("github").guards_body_replay
    assert not provider("stripe").guards_body_replay
    assert not provider("github", on_body_replay="allow").guards_body_replay
    assert provider("stripe", on_body_replay="reject").guards_body_replay


def test_a_header_inside_the_signed_message_counts_as_signed() -> None:
    # Standard Webhooks signs webhook-id; the same id read from a header it does not sign is not.
    assert unsigned_id_headers(preset_spec("standard-webhooks"),
                               preset_event_id("standard-webhooks")) == ()
    assert unsigned_id_headers(preset_spec("github"),
                               preset_event_id("standard-webhooks")) == ("webhook-id",)


def test_docs_name_the_guarded_presets() -> None:
    text = (REPO / "docs" / "providers.md").read_text(encoding="utf-8")
    section = re.search(r"\*\*Replayed bodies\.\*\*(.*?)\n- \*\*", text, re.S)
    assert section is not None, "docs/providers.md: the 'Replayed bodies' paragraph"
    named = set(re.findall(r"`([a-z-]+)`", section.group(1))) & set(preset_names())
    assert named == GUARDED
