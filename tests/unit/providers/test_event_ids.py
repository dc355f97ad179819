"""Event ids per preset: where each comes from, composites, batches, and the rule that a
redelivery changing only per-attempt headers (or a re-signed timestamp) keeps the same id."""

from __future__ import annotations

import json

import pytest
import stripe
from slack_sdk.signature import SignatureVerifier

from sidecar.core.errors import ConfigError, EventIdError
from sidecar.core.eventid import delivery_items, extract_event_id, parse_event_id_spec
from sidecar.core.signing import Delivery, sign, verify

from .helpers import NOW, keys_for, preset_event_id, preset_spec


def ids(preset: str, body: bytes, headers: dict[str, str] | None = None) -> list[str]:
    return [i.event_id for i in delivery_items(preset_event_id(preset), body, headers or {})]


# --- redeliveries: per-attempt headers never change the id -----------------------------------


def test_slack_retry_headers_do_not_change_the_id() -> None:
    spec, event_id = preset_spec("slack"), preset_event_id("slack")
    secret = "8f742231b10e8888abcd99yyyzzz85a5"
    body = b'{"type":"event_callback","event_id":"Ev08MFMKH6","event_time":1234567890}'
    seen = set()
    for attempt, (retry, timestamp) in enumerate([(None, NOW), ("1", NOW + 1), ("3", NOW + 360)]):
        signature = SignatureVerifier(secret).generate_signature(timestamp=str(timestamp),
                                                                 body=body)
        assert signature is not None
        headers = {"X-Slack-Signature": signature, "X-Slack-Request-Timestamp": str(timestamp)}
        if retry is not None:
            headers |= {"X-Slack-Retry-Num": retry, "X-Slack-Retry-Reason": "http_timeout"}
        verify(spec, keys_for(spec, secret), Delivery(body, headers), timestamp + attempt)
        seen.add(extract_event_id(event_id, body, headers))
    assert seen == {"Ev08MFMKH6"}


def test_square_retry_headers_do_not_change_the_id() -> None:
    spec, event_id = preset_spec("square"), preset_event_id("square")
    body = b'{"merchant_id":"M1","type":"payment.updated","event_id":"6a8f5f28-54a1-4eb0-a98a"}'
    [key] = keys_for(spec, "sq-key")
    headers = sign(spec, key, Delivery(body, {}), NOW)
    first = extract_event_id(event_id, body, headers)
    retry = {**headers, "square-retry-number": "2", "square-retry-reason": "http_timeout",
             "square-initial-delivery-timestamp": "2025-10-09T08:23:20Z"}
    verify(spec, [key], Delivery(body, retry), NOW)
    assert extract_event_id(event_id, body, retry) == first == "6a8f5f28-54a1-4eb0-a98a"


def test_twitch_retry_header_does_not_change_the_id() -> None:
    spec, event_id = preset_spec("twitch"), preset_event_id("twitch")
    [key] = keys_for(spec, "twitch-secret-123")
    body = b'{"subscription":{"type":"channel.follow"},"event":{"user_id":"1"}}'
    message_id = "befa7b53-d79d-478f-86b9-120f112b044e"
    first = sign(spec, key, Delivery(body, {"Twitch-Eventsub-Message-Id": message_id}), NOW)
    later = sign(spec, key, Delivery(body, {"Twitch-Eventsub-Message-Id": message_id}), NOW + 120)
    assert first != later  # re-signed with a new timestamp
    collected = set()
    for added, retry in ((first, None), (later, "1")):
        headers = {"Twitch-Eventsub-Message-Id": message_id, **added}
        if retry is not None:
            headers["Twitch-Eventsub-Message-Retry"] = retry
        verify(spec, [key], Delivery(body, headers), NOW + 130)
        collected.add(extract_event_id(event_id, body, headers))
    assert collected == {message_id}


def test_stripe_resigned_timestamp_does_not_change_the_id() -> None:
    spec, event_id = preset_spec("stripe"), preset_event_id("stripe")
    secret = "whsec_test_per_attempt"
    payload = '{"id":"evt_1Nq","object":"event","type":"invoice.paid"}'
    collected = set()
    for timestamp in (NOW, NOW + 3600, NOW + 86400):
        header = stripe.WebhookSignature.generate_signature_header(payload, secret,
                                                                   timestamp=timestamp)
        headers = {"Stripe-Signature": header}
        verify(spec, keys_for(spec, secret), Delivery(payload.encode(), headers), timestamp)
        collected.add(extract_event_id(event_id, payload.encode(), headers))
    assert collected == {"evt_1Nq"}


def test_hubspot_attempt_number_does_not_change_the_ids() -> None:
    events = [{"eventId": 100, "subscriptionId": 7, "occurredAt": 1700000000000,
               "attemptNumber": 0, "portalId": 1},
              {"eventId": 101, "subscriptionId": 7, "occurredAt": 1700000000001,
               "attemptNumber": 0, "portalId": 1}]
    first = ids("hubspot", json.dumps(events).encode())
    for event in events:
        event["attemptNumber"] = 3
    # A retry may also regroup the batch: order and grouping do not matter per item.
    retried = ids("hubspot", json.dumps(events[::-1]).encode())
    assert first == ["7:100:1700000000000", "7:101:1700000000001"]
    assert sorted(retried) == first


@pytest.mark.parametrize(
    "preset, body, headers, expected",
    [
        ("github", b"{}", {"X-GitHub-Delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958"},
         ["72d3162e-cc78-11e3-81ab-4c9367dc0958"]),
        ("shopify", b"{}", {"X-Shopify-Webhook-Id": "b54557e4", "X-Shopify-Event-Id": "e1"},
         ["b54557e4"]),
        ("clerk", b"{}", {"svix-id": "msg_1"}, ["msg_1"]),
        ("resend", b"{}", {"svix-id": "msg_2"}, ["msg_2"]),
        ("paddle", b'{"event_id":"evt_01h","notification_id":"ntf_01h"}', {}, ["evt_01h"]),
        ("workos", b'{"id":"event_01E","event":"dsync.user.created"}', {}, ["event_01E"]),
        ("linear", b"{}", {"Linear-Delivery": "d1"}, ["d1"]),
        ("intercom", b'{"id":"notif_1","delivery_attempts":2}', {}, ["notif_1"]),
        ("bitbucket", b"{}", {"X-Request-UUID": "u-1", "X-Attempt-Number": "2"}, ["u-1"]),
        ("razorpay", b"{}", {"x-razorpay-event-id": "Fx1"}, ["Fx1"]),
        ("mollie", b'{"resource":"event","id":"event_GvJ8"}', {}, ["event_GvJ8"]),
        ("gitlab", b"{}", {"Idempotency-Key": "k-1", "X-Gitlab-Webhook-UUID": "w-1"}, ["k-1"]),
        ("discord", b'{"id":"1234567890","type":2}', {}, ["1234567890"]),
        ("twilio", b"MessageSid=SM1", {"I-Twilio-Idempotency-Token": "tok-1"}, ["tok-1"]),
        ("mailgun", b'{"event-data":{"id":"CPgfbm"}}', {}, ["CPgfbm"]),
        ("zoom", b'{"event":"meeting.started","event_ts":1626230691572,'
                 b'"payload":{"object":{"id":"8509","uuid":"4444AAA/iiiiiii=="}}}', {},
         ["meeting.started:1626230691572:8509:4444AAA/iiiiiii=="]),
        ("zoom", b'{"event":"app_deauthorized","event_ts":1626230691572,"payload":{}}', {},
         ["app_deauthorized:1626230691572::"]),
        ("lemonsqueezy", b'{"meta":{"event_name":"order_created"},"data":{"type":"orders",'
                         b'"id":"1","attributes":{"updated_at":"2021-05-24T14:15:07.000000Z"}}}',
         {}, ["order_created:orders:1:2021-05-24T14%3A15%3A07.000000Z"]),
        ("sendgrid", b'[{"sg_event_id":"a"},{"sg_event_id":"b"},{"sg_event_id":"a"}]', {},
         ["a", "b"]),
        ("adyen", json.dumps({"notificationItems": [{"NotificationRequestItem": {
            "merchantAccountCode": "M", "pspReference": "P:1", "eventCode": "AUTHORISATION",
            "success": "true"}}]}).encode(), {}, ["M:P%3A1:AUTHORISATION:true"]),
    ],
)
def test_where_each_preset_takes_its_id(
    preset: str, body: bytes, headers: dict[str, str], expected: list[str]
) -> None:
    assert ids(preset, body, headers) == expected


# --- composite and batch rules ---------------------------------------------------------------


def test_composite_escapes_the_separator() -> None:
    spec = parse_event_id_spec({"composite": [{"json": "$.a"}, {"json": "$.b"}]}, "p")
    one = extract_event_id(spec, b'{"a": "x:y", "b": "z"}', {})
    two = extract_event_id(spec, b'{"a": "x", "b": "y:z"}', {})
    assert one == "x%3Ay:z" and two == "x:y%3Az" and one != two
    assert extract_event_id(spec, b'{"a": "100%", "b": true}', {}) == "100%25:true"


def test_composite_mixes_header_and_json_and_reports_missing_parts() -> None:
    spec = parse_event_id_spec({"composite": [{"header": "X-Shop"}, {"json": "$.id"}]}, "p")
    assert extract_event_id(spec, b'{"id": 5}', {"x-shop": "s.example"}) == "s.example:5"
    for body, headers in ((b'{"id": 5}', {}), (b'{"other": 5}', {"X-Shop": "s"}),
                          (b'{"id": null}', {"X-Shop": "s"})):
        with pytest.raises(EventIdError) as caught:
            extract_event_id(spec, body, headers)
        assert caught.value.reason == "missing_event_id"
    with pytest.raises(EventIdError) as caught:
        extract_event_id(spec, b'{"id": {"deep": 1}}', {"X-Shop": "s"})
    assert caught.value.reason == "invalid_event_id"


def test_batch_errors() -> None:
    spec = preset_event_id("sendgrid")
    for body, why in ((b"[]", "missing_event_id"), (b'{"sg_event_id": "a"}', "missing_event_id"),
                      (b'[{"sg_event_id": "a"}, {"email": "x"}]', "missing_event_id"),
                      (b'[{"sg_event_id": "a"}, {"sg_event_id": ""}]', "invalid_event_id"),
                      (b"not json", "invalid_json")):
        with pytest.raises(EventIdError) as caught:
            [i.event_id for i in delivery_items(spec, body, {})]
        assert caught.value.reason == why, body
    with pytest.raises(ValueError, match="batch_items"):
        extract_event_id(spec, b'[{"sg_event_id": "a"}]', {})


def test_non_batch_specs_give_one_id() -> None:
    spec = preset_event_id("stripe")
    assert not spec.is_batch and preset_event_id("adyen").is_batch
    assert [i.event_id for i in delivery_items(spec, b'{"id": "evt_1"}', {})] == ["evt_1"]


@pytest.mark.parametrize(
    "data, path",
    [
        ({"composite": [{"json": "$.a"}]}, "p.composite"),
        ({"composite": "$.a"}, "p.composite"),
        ({"composite": [{"json": "$.a"}, {"jsn": "$.b"}]}, "p.composite[1].jsn"),
        ({"composite": [{"json": "$.a", "optional": True}, {"json": "$.b", "optional": True}]},
         "p.composite"),
        ({"composite": [{"json": "$.a"}, {"json": "$.b", "optional": "yes"}]},
         "p.composite[1].optional"),
        ({"composite": [{"json": "$.a[*]"}, {"json": "$.b"}]}, "p.composite[0].json"),
        ({"json": "$.id", "composite": []}, "p.composite"),
        ({"batch": {"items": "$.items"}}, "p.batch.item_id"),
        ({"batch": {"items": "$.items", "item_id": {"json": "$.id"}}}, "p.batch.items"),
        ({"batch": {"items": "$[*]", "item_id": {"batch": {}}}}, "p.batch.item_id.batch"),
        ({"batch": {"items": "$[*]", "item_id": {"json": "$.id"}, "x": 1}}, "p.batch.x"),
    ],
)
def test_bad_composite_and_batch_specs_name_the_key(data: object, path: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_event_id_spec(data, "p")
    assert caught.value.path == path
