"""How an operator names a queue (``sidecar.ops.routes``): a provider, a destination by its key
or by the provider's key and its name; the errors name what is configured."""

from __future__ import annotations

from typing import Any

import pytest

from sidecar.config.loader import parse_config
from sidecar.config.model import Config
from sidecar.core.errors import OperationError
from sidecar.ops.events import listing_query
from sidecar.ops.routes import find_route, named_key, split_key


def config() -> Config:
    data: dict[str, Any] = {
        "upstream": {"url": "http://127.0.0.1:3000"},
        "providers": {
            "stripe": {"path": "/webhooks/stripe", "preset": "stripe", "secrets": ["whsec_abc"],
                       "mode": "queue",
                       "destinations": [{"name": "billing"}, {"name": "crm"}]},
            "github": {"path": "/webhooks/github", "preset": "github", "secrets": ["s"]},
        },
    }
    return parse_config(data, env={})


def refused(call: Any, *args: Any) -> OperationError:
    with pytest.raises(OperationError) as raised:
        call(*args)
    return raised.value


def test_a_provider_or_a_destination_by_its_key_or_its_name() -> None:
    cfg = config()
    assert find_route(cfg, "stripe").key == "stripe"
    assert find_route(cfg, "stripe").fans_out
    for route in (find_route(cfg, "stripe.billing"), find_route(cfg, "stripe", "billing")):
        assert (route.key, route.destination, route.provider_key) == (
            "stripe.billing", "billing", "stripe")
    assert named_key(cfg, "stripe", "crm") == "stripe.crm"
    # Without a destination the key is taken as it is: rows of a provider no longer in the
    # config can still be read.
    assert named_key(cfg, "removed", None) == named_key(cfg, "removed", "") == "removed"


def test_unknown_names_are_404s_naming_what_is_configured() -> None:
    cfg = config()
    for args in ((cfg, "stripe", "nope"), (cfg, "stripe.nope")):
        error = refused(find_route, *args)
        assert error.status == 404
        assert str(error) == ("provider 'stripe' has no destination 'nope' (its destinations: "
                              "billing, crm)")
    error = refused(find_route, cfg, "github", "billing")
    assert (error.status, str(error)) == (404, "provider 'github' has no destinations, so no "
                                               "'billing'")
    error = refused(find_route, cfg, "strpe", "billing")
    assert error.status == 404 and "configured: stripe, github" in str(error)
    error = refused(find_route, cfg, "stripe.billing", "crm")
    assert error.status == 404 and "names a destination already" in str(error)
    assert refused(named_key, cfg, "stripe", "nope").status == 404


def test_a_destinations_key_splits_into_its_provider_and_name() -> None:
    assert split_key("stripe.billing") == ("stripe", "billing")
    assert split_key("stripe") is None
    assert split_key(".billing") is None and split_key("stripe.") is None


def test_the_listing_covers_every_queue_and_reads_a_destination_by_name() -> None:
    cfg = config()
    assert listing_query(cfg, {}).providers == (
        "github", "stripe", "stripe.billing", "stripe.crm")
    assert listing_query(cfg, {"provider": "stripe", "destination": "crm"}).providers == (
        "stripe.crm",)
    assert listing_query(cfg, {"provider": "stripe.crm"}).providers == ("stripe.crm",)
    assert listing_query(cfg, {"provider": "stripe", "destination": ""}).providers == (
        "stripe",)
    assert refused(listing_query, cfg, {"destination": "crm"}).status == 400
    assert refused(listing_query, cfg, {"provider": "stripe", "destination": "x"}).status == 404
