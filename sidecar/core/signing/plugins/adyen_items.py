"""Adyen standard notifications (providers.md §1.10, vector §3.8): each item of
``notificationItems[*].NotificationRequestItem`` carries its own
``additionalData.hmacSignature``, the base64 HMAC-SHA256 of eight item fields joined by ``:``
(``pspReference:originalReference:merchantAccountCode:merchantReference:value:currency:
eventCode:success``; missing fields are empty, ``value``/``currency`` come from ``amount``).

The key is the 64-hex-digit HMAC key, hex-decoded. A delivery is authentic only when *every*
item verifies (each against any configured key, so rotation works item by item). The body is
not signed as bytes: only those eight fields are.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sidecar.core.errors import VerificationError
from sidecar.core.fields import check_keys
from sidecar.core.signing.delivery import Delivery, SignedDelivery
from sidecar.core.signing.plugins.base import json_document, parse_plugin_secret
from sidecar.core.signing.spec import SecretSpec

FIELDS = ("pspReference", "originalReference", "merchantAccountCode", "merchantReference",
          "value", "currency", "eventCode", "success")


def _text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int):
        return str(value)
    raise VerificationError("malformed_body", "a signed Adyen field is not text or a number")


def signing_string(item: Mapping[str, Any]) -> str:
    """The ``:``-joined field string one item's signature covers."""
    amount = item.get("amount")
    fields: dict[str, object] = dict(item)
    if isinstance(amount, Mapping):
        fields["value"] = amount.get("value")
        fields["currency"] = amount.get("currency")
    else:
        fields["value"] = fields["currency"] = None
    return ":".join(_text(fields.get(name)) for name in FIELDS)


def notification_items(document: object) -> list[dict[str, Any]]:
    """The NotificationRequestItem objects; ``VerificationError`` unless there is at least one
    and each is an object."""
    items = document.get("notificationItems") if isinstance(document, dict) else None
    if not isinstance(items, list) or not items:
        raise VerificationError("missing_signature", "no notificationItems")
    found = []
    for entry in items:
        item = entry.get("NotificationRequestItem") if isinstance(entry, dict) else None
        if not isinstance(item, dict):
            raise VerificationError("malformed_body", "item without NotificationRequestItem")
        found.append(item)
    return found


def _mac(key: bytes, item: Mapping[str, Any]) -> bytes:
    try:
        message = signing_string(item).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate from a \ud800 escape
        raise VerificationError("malformed_body", "unusable item field") from None
    return hmac.new(key, message, hashlib.sha256).digest()


@dataclass(frozen=True, slots=True)
class AdyenScheme:
    secret: SecretSpec

    def verify(self, keys: Sequence[bytes], delivery: Delivery, now: float) -> None:
        for item in notification_items(json_document(delivery.body)):
            data = item.get("additionalData")
            text = data.get("hmacSignature") if isinstance(data, dict) else None
            if not isinstance(text, str) or not text:
                raise VerificationError("missing_signature", "item without hmacSignature")
            try:
                candidate = base64.b64decode(text.encode("ascii"), validate=True)
            except (ValueError, binascii.Error):
                raise VerificationError("malformed_signature", "not base64") from None
            matched = False
            for key in keys:
                matched |= hmac.compare_digest(_mac(key, item), candidate)
            if not matched:
                raise VerificationError("bad_signature")

    def sign(self, key: bytes, delivery: Delivery, now: float) -> SignedDelivery:
        try:
            document = json_document(delivery.body)
            items = notification_items(document)
            for item in items:
                signature = base64.b64encode(_mac(key, item)).decode("ascii")
                data = item.setdefault("additionalData", {})
                if not isinstance(data, dict):
                    raise VerificationError("malformed_body", "additionalData is not an object")
                data["hmacSignature"] = signature
        except VerificationError as exc:
            raise ValueError(f"cannot sign: {exc.detail or exc.reason}") from None
        return SignedDelivery(json.dumps(document).encode("utf-8"), {})


def parse_adyen(data: Mapping[str, object], path: str) -> AdyenScheme:
    check_keys(data, path, required=("plugin",), optional=("secret",),
               context=" for plugin adyen")
    return AdyenScheme(parse_plugin_secret(data, path, "hex"))
