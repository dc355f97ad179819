"""A queue-mode provider's ``destinations``: each destination becomes a route of its own
(``<provider>.<name>``) with its upstream over the top level's, its own limits and filter, and
its provider's key for the app; the mistakes are errors at the file's line and column."""

from __future__ import annotations

import base64
import textwrap

import pytest

from sidecar.config.keyring import Keyring
from sidecar.config.loader import load_config_text
from sidecar.config.model import Config, Mode
from sidecar.config.problems import ConfigProblems
from sidecar.core.rates import Rate

OWN_SIGNING = "whsec_" + base64.b64encode(bytes(range(32, 64))).decode()

GOOD = f"""\
upstream:
  url: http://app:3000
  timeout: 5s
providers:
  stripe:
    preset: stripe
    secrets: [whsec_x]
    path: /s
    mode: queue
    destinations:
      - name: billing
      - name: crm
        upstream: {{url: "http://crm:9000", timeout: 20s, signing_secrets: [{OWN_SIGNING}]}}
        delivery: {{rate: 10/s, concurrency: 2}}
        filter: {{types: {{allow: ["customer.*"]}}}}
  github:
    preset: github
    secrets: [x]
    path: /g
"""


def load(text: str) -> Config:
    return load_config_text(textwrap.dedent(text), env={}, source="c.yaml")


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigProblems) as caught:
        load(text)
    return [p.render("c.yaml") for p in caught.value.problems]


def test_each_destination_is_a_route_of_its_own_after_its_provider() -> None:
    config = load(GOOD)
    assert [r.key for r in config.routes] == ["stripe", "stripe.billing", "stripe.crm", "github"]
    assert [r.key for r in config.app_routes] == ["stripe.billing", "stripe.crm", "github"]
    stripe, billing, crm = config.routes[:3]
    assert stripe.fans_out and not billing.fans_out
    assert (billing.destination, billing.provider_key) == ("billing", "stripe")
    assert (stripe.destination, stripe.provider_key) == (None, "stripe")
    assert billing.upstream == config.upstream  # nothing given: the top level's, whole
    assert (crm.upstream.url, crm.upstream.timeout) == ("http://crm:9000", 20.0)
    assert crm.upstream.connect_timeout == config.upstream.connect_timeout
    assert crm.delivery.rate == Rate(10, 1.0) and crm.delivery.concurrency == 2
    assert billing.delivery.rate is None and billing.filter is None
    assert crm.filter is not None and crm.filter.uses_types
    # The provider's queue settings are every destination's.
    assert billing.mode is Mode.QUEUE and billing.queue == stripe.queue
    assert billing.lease == stripe.lease and billing.retention == stripe.retention
    assert config.route("stripe.crm") is crm and config.route("stripe.nope") is None
    assert stripe.route("crm") is crm and config.provider("stripe.crm") is None


def test_a_destination_signs_with_its_own_secrets() -> None:
    config = load(GOOD)
    keyring = Keyring(config.routes, config.upstream.signing_secrets)
    assert keyring.signing_keys("stripe.crm") == (bytes(range(32, 64)),)
    assert keyring.signing_keys("stripe.billing") == ()


HEAD = """\
upstream: {url: "http://app:3000"}
providers:
  stripe:
    preset: stripe
    secrets: [whsec_x]
    path: /s
"""


@pytest.mark.parametrize(("block", "expected"), [
    ("""\
    mode: queue
    destinations:
      - name: crm
      - name: crm
""", "c.yaml:10:9: providers.stripe.destinations[1].name: 'crm' is already the name of "
     "providers.stripe.destinations[0]"),
    ("""\
    mode: queue
    upstream: {url: "http://x"}
    destinations: [{name: crm}]
""", "c.yaml:8:5: providers.stripe.upstream: upstream and destinations do not go together"),
    ("""\
    mode: queue
    delivery: {rate: 5/s}
    destinations: [{name: crm}]
""", "c.yaml:8:5: providers.stripe.delivery: delivery and destinations do not go together"),
    ("""\
    destinations: [{name: crm}]
""", "c.yaml:7:5: providers.stripe.destinations: applies to queue mode"),
    ("""\
    mode: queue
    destinations:
      - name: Crm
""", "c.yaml:9:9: providers.stripe.destinations[0].name: must be lower-case letters"),
    ("""\
    mode: queue
    destinations:
      - name: slow
        upstream: {timeout: 90s}
""", "c.yaml:3:3: providers.stripe.lease: must exceed "
     "providers.stripe.destinations[0].upstream.timeout (90s"),
    ("""\
    mode: queue
    event_type: null
    destinations:
      - name: typed
        filter: {types: {allow: ["x.*"]}}
""", "c.yaml:11:18: providers.stripe.destinations[0].filter.types: this provider declares no "
     "event type"),
])
def test_mistakes_are_errors_at_their_line(block: str, expected: str) -> None:
    found = problems(HEAD + block)
    assert any(line.startswith(expected) for line in found), found


def test_a_destination_needs_an_app_but_its_provider_does_not() -> None:
    text = HEAD.replace('upstream: {url: "http://app:3000"}\n', "") + """\
    mode: queue
    destinations:
      - name: crm
      - name: billing
        upstream: {url: "http://billing"}
"""
    assert problems(text) == [
        "c.yaml:8:9: providers.stripe.destinations[0].upstream.url: is required: this "
        "destination has no app (neither its own upstream.url nor a top-level upstream.url)"]


def test_destinations_is_a_list_of_mappings() -> None:
    text = """\
    upstream: {url: "http://app:3000"}
    providers:
      stripe: {preset: stripe, secrets: [whsec_x], path: /s, mode: queue, destinations: crm}
    """
    assert any("providers.stripe.destinations: must be a list of destinations" in line
               for line in problems(text))


def test_without_destinations_nothing_changes() -> None:
    config = load(GOOD.replace("    mode: queue\n", "").split("    destinations:")[0]
                  + "  github:\n    preset: github\n    secrets: [x]\n    path: /g\n")
    assert [r.key for r in config.routes] == ["stripe", "github"]
    assert config.routes == config.app_routes == config.providers
