"""Forward authentication: the proxy signs what it sends to the app in the Standard Webhooks
format, so the app can tell a forward that went through verification and deduplication from a
request that reached it some other way, with any Standard Webhooks library in any language.

Unlike the provider's own signature (forwarded untouched, its timestamp as old as the first
delivery), this one is made at each forward, so a re-drive hours later still verifies.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import math
from collections.abc import Sequence
from typing import Final

from sidecar.core.errors import ConfigError

SECRET_PREFIX: Final = "whsec_"
MIN_KEY_BYTES: Final = 24  # the spec's lower bound for generated secrets (192 bits)

ID_HEADER: Final = "webhook-id"
TIMESTAMP_HEADER: Final = "webhook-timestamp"
SIGNATURE_HEADER: Final = "webhook-signature"
HEADERS: Final = (ID_HEADER, TIMESTAMP_HEADER, SIGNATURE_HEADER)


def decode_forward_secret(raw: str, path: str) -> bytes:
    """A ``whsec_`` secret's key bytes; ``ConfigError`` (never quoting the secret) if unusable.
    The prefix is required so that the same string works unchanged in the app's library."""
    if not raw.startswith(SECRET_PREFIX):
        raise ConfigError(path, f"must be a Standard Webhooks secret: {SECRET_PREFIX!r} followed "
                          "by base64 (e.g. from: python -c \"import base64, os; "
                          "print('whsec_' + base64.b64encode(os.urandom(32)).decode())\")")
    try:
        key = base64.b64decode(raw[len(SECRET_PREFIX):], validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError(path, f"secret is not valid base64 after the {SECRET_PREFIX!r} "
                          "prefix") from None
    if len(key) < MIN_KEY_BYTES:
        raise ConfigError(path, f"secret is too short: {len(key)} bytes, at least "
                          f"{MIN_KEY_BYTES} (32 random bytes are usual)")
    return key


def forward_signature(keys: Sequence[bytes], message_id: str, body: bytes,
                      now: float) -> dict[str, str]:
    """The three Standard Webhooks headers for one forward: ``v1`` (HMAC-SHA256 over
    ``id.timestamp.body``, base64) under every key, space-separated, so an app holding either
    the old or the new secret accepts it during a rotation."""
    timestamp = str(math.floor(now))
    message = b"%s.%s.%s" % (message_id.encode(), timestamp.encode(), body)
    signatures = " ".join(
        "v1," + base64.b64encode(hmac.digest(key, message, hashlib.sha256)).decode()
        for key in keys
    )
    return {ID_HEADER: message_id, TIMESTAMP_HEADER: timestamp, SIGNATURE_HEADER: signatures}
