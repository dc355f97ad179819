"""The pure core of filters: which events a provider's ``filter:`` keeps, for every kind of rule
and every way its input can be missing; where the event type is read; what the parser refuses."""

from __future__ import annotations

from typing import Any

import pytest

from sidecar.core.errors import ConfigError
from sidecar.core.filter_config import parse_event_type_spec, parse_filter_spec
from sidecar.core.filtering import (
    NOT_JSON,
    FilterSpec,
    Verdict,
    Why,
    judge,
    read_event_type,
)


def spec(**raw: Any) -> FilterSpec:
    return parse_filter_spec(raw, "providers.p.filter")


STRIPE_TYPES = spec(types={"allow": ["invoice.*", "customer.subscription.*"],
                           "drop": ["invoice.upcoming"]})
ONLY_DROP = spec(types={"drop": ["charge.*"]})
LIVE = spec(when=[{"path": "$.livemode", "equals": True},
                  {"path": "$.data.object.currency", "in": ["eur", "usd"]}])
NO_TEST_CLOCK = spec(when=[{"path": "$.data.object.test_clock", "exists": False}])
BOTH = spec(types={"allow": ["invoice.*"]}, when=[{"path": "$.livemode", "equals": True}])
LIVE_EUR = {"livemode": True, "data": {"object": {"currency": "eur"}}}


@pytest.mark.parametrize(("rules", "event_type", "document", "verdict"), [
    # types: drop is read first, then allow
    (STRIPE_TYPES, "invoice.paid", {}, Verdict(True, Why.PASSED)),
    (STRIPE_TYPES, "invoice.payment.failed", {}, Verdict(True, Why.PASSED)),  # * spans dots
    (STRIPE_TYPES, "customer.subscription.updated", {}, Verdict(True, Why.PASSED)),
    (STRIPE_TYPES, "invoice.upcoming", {}, Verdict(False, Why.TYPE_DROPPED, "invoice.upcoming")),
    (STRIPE_TYPES, "charge.succeeded", {},
     Verdict(False, Why.TYPE_NOT_ALLOWED, "charge.succeeded")),
    (STRIPE_TYPES, "Invoice.paid", {}, Verdict(False, Why.TYPE_NOT_ALLOWED, "Invoice.paid")),
    (STRIPE_TYPES, "customer.created", {},
     Verdict(False, Why.TYPE_NOT_ALLOWED, "customer.created")),
    # only drop given: everything else passes
    (ONLY_DROP, "charge.refunded", {}, Verdict(False, Why.TYPE_DROPPED, "charge.*")),
    (ONLY_DROP, "invoice.paid", {}, Verdict(True, Why.PASSED)),
    # a type that cannot be read never drops
    (STRIPE_TYPES, None, {}, Verdict(True, Why.NO_EVENT_TYPE)),
    (ONLY_DROP, None, NOT_JSON, Verdict(True, Why.NO_EVENT_TYPE)),
    # conditions: all must hold
    (LIVE, None, LIVE_EUR, Verdict(True, Why.PASSED)),
    (LIVE, None, {**LIVE_EUR, "livemode": False},
     Verdict(False, Why.CONDITION_FAILED, "$.livemode equals true")),
    (LIVE, None, {"livemode": True, "data": {"object": {"currency": "gbp"}}},
     Verdict(False, Why.CONDITION_FAILED, '$.data.object.currency in ["eur", "usd"]')),
    # a missing field: equals and in do not hold
    (LIVE, None, {"data": {"object": {"currency": "eur"}}},
     Verdict(False, Why.CONDITION_FAILED, "$.livemode equals true")),
    (LIVE, None, {"livemode": True},
     Verdict(False, Why.CONDITION_FAILED, '$.data.object.currency in ["eur", "usd"]')),
    # JSON equality: true is not 1, "true" is not true
    (LIVE, None, {**LIVE_EUR, "livemode": 1},
     Verdict(False, Why.CONDITION_FAILED, "$.livemode equals true")),
    (LIVE, None, {**LIVE_EUR, "livemode": "true"},
     Verdict(False, Why.CONDITION_FAILED, "$.livemode equals true")),
    # exists: false holds for a missing field, not for a present null
    (NO_TEST_CLOCK, None, {"data": {"object": {}}}, Verdict(True, Why.PASSED)),
    (NO_TEST_CLOCK, None, {"data": {"object": {"test_clock": None}}},
     Verdict(False, Why.CONDITION_FAILED, "$.data.object.test_clock exists false")),
    # a body that is not JSON never drops by a condition
    (LIVE, None, NOT_JSON, Verdict(True, Why.NOT_JSON)),
    # types and conditions together: the type rules first
    (BOTH, "charge.succeeded", {"livemode": False},
     Verdict(False, Why.TYPE_NOT_ALLOWED, "charge.succeeded")),
    (BOTH, "invoice.paid", {"livemode": False},
     Verdict(False, Why.CONDITION_FAILED, "$.livemode equals true")),
    (BOTH, "invoice.paid", {"livemode": True}, Verdict(True, Why.PASSED)),
    (BOTH, None, {"livemode": False},
     Verdict(False, Why.CONDITION_FAILED, "$.livemode equals true")),
    (BOTH, None, {"livemode": True}, Verdict(True, Why.NO_EVENT_TYPE)),
])
def test_the_verdict(rules: FilterSpec, event_type: str | None, document: object,
                     verdict: Verdict) -> None:
    assert judge(rules, event_type, document) == verdict


@pytest.mark.parametrize(("glob", "event_type", "matches"), [
    ("invoice.*", "invoice.paid", True),
    ("invoice.*", "invoice", False),
    ("invoice.?aid", "invoice.paid", True),
    ("orders/*", "orders/create", True),
    ("[!p]ush", "push", False),
    ("[pP]ush", "Push", True),
    ("Push Hook", "Push Hook", True),
    ("push", "PUSH", False),
])
def test_globs_are_fnmatch_and_case_sensitive(glob: str, event_type: str,
                                              matches: bool) -> None:
    assert judge(spec(types={"allow": [glob]}), event_type, {}).keep is matches


def test_numbers_compare_as_json_numbers() -> None:
    rules = spec(when=[{"path": "$.n", "in": [1, 2.5]}])
    assert judge(rules, None, {"n": 1.0}).keep
    assert judge(rules, None, {"n": 2.5}).keep
    assert not judge(rules, None, {"n": True}).keep
    assert not judge(rules, None, {"n": "1"}).keep


@pytest.mark.parametrize(("raw", "document", "headers", "found"), [
    ({"json": "$.type"}, {"type": "invoice.paid"}, {}, "invoice.paid"),
    ({"json": "$.type"}, {"type": 2}, {}, "2"),
    ({"json": "$.type"}, {"type": True}, {}, None),
    ({"json": "$.type"}, {"type": {"a": 1}}, {}, None),
    ({"json": "$.type"}, {}, {}, None),
    ({"json": "$.type"}, NOT_JSON, {}, None),
    ({"json": "$['event-data'].event"}, {"event-data": {"event": "opened"}}, {}, "opened"),
    ({"header": "X-GitHub-Event"}, NOT_JSON, {"X-GitHub-Event": "push"}, "push"),
    ({"header": ["X-A", "X-B"]}, {}, {"X-B": "b"}, "b"),
    ({"header": "X-GitHub-Event"}, {"type": "x"}, {}, None),
])
def test_reading_the_event_type(raw: dict[str, Any], document: object,
                                headers: dict[str, str], found: str | None) -> None:
    assert read_event_type(parse_event_type_spec(raw, "p.event_type"), document,
                           headers) == found


@pytest.mark.parametrize(("raw", "path", "message"), [
    ({}, "providers.p.filter", "an empty filter drops nothing"),
    ({"types": {}}, "providers.p.filter.types", "give allow or drop"),
    ({"types": {"allow": []}}, "providers.p.filter.types.allow", "non-empty list of globs"),
    ({"types": {"allow": "invoice.*"}}, "providers.p.filter.types.allow", "non-empty list"),
    ({"types": {"allow": ["invoice.[paid"]}}, "providers.p.filter.types.allow[0]",
     "is not closed"),
    ({"types": {"allow": [""]}}, "providers.p.filter.types.allow[0]", "non-empty glob"),
    ({"types": {"allow": [" invoice.*"]}}, "providers.p.filter.types.allow[0]", "spaces"),
    ({"types": {"keep": ["a"]}}, "providers.p.filter.types.keep", "unknown key"),
    ({"when": []}, "providers.p.filter.when", "non-empty list of conditions"),
    ({"when": [{"path": "$.a", "matches": "x"}]}, "providers.p.filter.when[0].matches",
     "unknown key"),
    ({"when": [{"path": "$.a"}]}, "providers.p.filter.when[0]", "give one operator"),
    ({"when": [{"equals": 1}]}, "providers.p.filter.when[0].path", "required"),
    ({"when": [{"path": "a.b", "equals": 1}]}, "providers.p.filter.when[0].path",
     "JSON path"),
    ({"when": [{"path": "$.items[*].a", "equals": 1}]}, "providers.p.filter.when[0].path",
     "must select one"),
    ({"when": [{"path": "$.a", "equals": 1, "in": [1]}]}, "providers.p.filter.when[0].in",
     "one operator per condition"),
    ({"when": [{"path": "$.a", "exists": "yes"}]}, "providers.p.filter.when[0].exists",
     "true or false"),
    ({"when": [{"path": "$.a", "in": []}]}, "providers.p.filter.when[0].in", "non-empty"),
    ({"when": [{"path": "$.a", "equals": {"b": 1}}]}, "providers.p.filter.when[0].equals",
     "must be a string, number"),
    ({"when": [{"path": "$.a", "in": [[1]]}]}, "providers.p.filter.when[0].in[0]",
     "must be a string, number"),
    ({"where": []}, "providers.p.filter.where", "unknown key"),
])
def test_bad_filters_name_their_key(raw: dict[str, Any], path: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_filter_spec(raw, "providers.p.filter")
    assert (caught.value.path, message in caught.value.message) == (path, True), caught.value


@pytest.mark.parametrize(("raw", "path"), [
    ({}, "p.event_type.header"),
    ({"header": "X-A", "json": "$.a"}, "p.event_type.json"),
    ({"json": "type"}, "p.event_type.json"),
    ({"composite": []}, "p.event_type.composite"),
])
def test_bad_event_types_name_their_key(raw: dict[str, Any], path: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_event_type_spec(raw, "p.event_type")
    assert caught.value.path == path
