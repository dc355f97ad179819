"""The batch policy's pure parts: item positions, the filtered body, the batch key."""

from __future__ import annotations

import json

from sidecar.core.batch import batch_key, filtered_body, item_digest
from sidecar.core.eventid import batch_items, parse_event_id_spec

TOP = parse_event_id_spec({"batch": {"items": "$[*]", "item_id": {"json": "$.id"}}}, "p")
NESTED = parse_event_id_spec({"batch": {"items": "$.notificationItems[*].NotificationRequestItem",
                                        "item_id": {"json": "$.psp"}}}, "p")


def test_every_item_kept_is_the_original_bytes() -> None:
    body = b'[ {"id": "a"},\n {"id": "b"} ]\r\n'
    items = batch_items(TOP, body, {})
    assert [(i.event_id, i.position) for i in items] == [("a", 0), ("b", 1)]
    assert filtered_body(TOP, body, {0, 1}, items) is body


def test_a_subset_keeps_the_envelope_and_only_those_items() -> None:
    body = json.dumps({"live": "true", "notificationItems": [
        {"NotificationRequestItem": {"psp": "1"}}, {"NotificationRequestItem": {"psp": "2"}},
        {"NotificationRequestItem": {"psp": "3"}}]}).encode()
    items = batch_items(NESTED, body, {})
    kept = json.loads(filtered_body(NESTED, body, {1}, items))
    assert kept == {"live": "true",
                    "notificationItems": [{"NotificationRequestItem": {"psp": "2"}}]}


def test_items_with_lone_surrogate_escapes_still_serialise() -> None:
    body = b'[{"id": "a"}, {"id": "b", "text": "\\ud83d"}]'
    items = batch_items(TOP, body, {})
    out = filtered_body(TOP, body, {1}, items)
    assert json.loads(out) == [{"id": "b", "text": "\ud83d"}]
    assert item_digest(items[1]) != item_digest(items[0])


def test_repeated_ids_keep_the_first_item_and_the_key_ignores_order() -> None:
    items = batch_items(TOP, b'[{"id": "a", "n": 1}, {"id": "a", "n": 2}]', {})
    assert [(i.event_id, i.value) for i in items] == [("a", {"id": "a", "n": 1})]
    assert batch_key("sendgrid", ["a", "b"]) == batch_key("sendgrid", ["b", "a"])
    assert batch_key("sendgrid", ["a", "b"]).startswith("sendgrid:batch:")
