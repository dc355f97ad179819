"""Mailgun (providers.md §2): the JSON body carries
``signature: {timestamp, token, signature}``; ``signature`` is the hex HMAC-SHA256 of
``timestamp`` ‖ ``token`` with the HTTP webhook signing key.

**The body itself is not signed.** A captured (timestamp, token, signature) triple verifies
with any body until the timestamp leaves the tolerance window, so the window is kept short
(the SDK's 15 minutes by default) and the event id dedupe is the only other protection.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sidecar.core.durations import parse_duration
from sidecar.core.errors import ConfigError, VerificationError
from sidecar.core.fields import check_keys, join_path
from sidecar.core.signing.delivery import Delivery, SignedDelivery
from sidecar.core.signing.plugins.base import json_document, parse_plugin_secret
from sidecar.core.signing.spec import SecretSpec, TimestampSpec
from sidecar.core.signing.timestamps import check_timestamp

_HEX = re.compile(r"[0-9a-fA-F]{64}")


def _fields(document: object) -> tuple[str, str, str]:
    block = document.get("signature") if isinstance(document, dict) else None
    if not isinstance(block, dict):
        raise VerificationError("missing_signature", "no signature object in the body")
    timestamp, token, signature = (block.get(k) for k in ("timestamp", "token", "signature"))
    if isinstance(timestamp, int) and not isinstance(timestamp, bool):
        timestamp = str(timestamp)
    if not isinstance(timestamp, str) or not timestamp:
        raise VerificationError("missing_timestamp")
    if not isinstance(token, str) or not token:
        raise VerificationError("missing_signature", "no token")
    if not isinstance(signature, str) or not _HEX.fullmatch(signature):
        raise VerificationError("malformed_signature", "not 64 hex digits")
    return timestamp, token, signature


def _message(timestamp: str, token: str) -> bytes:
    try:
        return (timestamp + token).encode("utf-8")
    except UnicodeEncodeError:
        raise VerificationError("malformed_signature", "unusable token") from None


@dataclass(frozen=True, slots=True)
class MailgunScheme:
    tolerance: float
    secret: SecretSpec

    def verify(self, keys: Sequence[bytes], delivery: Delivery, now: float) -> None:
        timestamp, token, signature = _fields(json_document(delivery.body))
        check_timestamp(TimestampSpec(None, "s", self.tolerance, "both"), timestamp, now)
        candidate = bytes.fromhex(signature)
        message = _message(timestamp, token)
        matched = False
        for key in keys:
            expected = hmac.new(key, message, hashlib.sha256).digest()
            matched |= hmac.compare_digest(expected, candidate)
        if not matched:
            raise VerificationError("bad_signature")

    def sign(self, key: bytes, delivery: Delivery, now: float) -> SignedDelivery:
        try:
            document = json_document(delivery.body)
        except VerificationError:
            raise ValueError("cannot sign: the Mailgun body must be a JSON object") from None
        if not isinstance(document, dict):
            raise ValueError("cannot sign: the Mailgun body must be a JSON object")
        timestamp = str(int(now))
        # Mailgun's token is 50 random characters; derived here so signing stays a pure
        # function (a different body or second gives a different token).
        token = hashlib.sha256(delivery.body + timestamp.encode()).hexdigest()[:50]
        signature = hmac.new(key, (timestamp + token).encode(), hashlib.sha256).hexdigest()
        document["signature"] = {"timestamp": timestamp, "token": token, "signature": signature}
        return SignedDelivery(json.dumps(document).encode("utf-8"), {})


def parse_mailgun(data: Mapping[str, object], path: str) -> MailgunScheme:
    check_keys(data, path, required=("plugin",), optional=("secret", "tolerance"),
               context=" for plugin mailgun")
    where = join_path(path, "tolerance")
    tolerance = parse_duration(data.get("tolerance", "15m"), where)
    if tolerance <= 0:
        raise ConfigError(where, "must be more than zero: the body is unsigned, so the "
                          "timestamp window is the only bound on replaying a signature")
    return MailgunScheme(tolerance, parse_plugin_secret(data, path, "utf8"))
