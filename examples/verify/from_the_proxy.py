import base64
import hashlib
import hmac
import os
import time

KEY = base64.b64decode(os.environ["WEBHOOK_SIDECAR_SIGNING_SECRET"].removeprefix("whsec_"))
TOLERANCE = 300  # seconds, either way


def from_the_proxy(body: bytes, headers) -> bool:
    """body: the raw request body (bytes, never decoded); headers: the request's headers."""
    try:
        msg_id = headers.get("webhook-id", "")
        timestamp = headers.get("webhook-timestamp", "")
        if not (timestamp.isascii() and timestamp.isdigit()):
            return False
        if abs(time.time() - int(timestamp)) > TOLERANCE:
            return False
        signed = f"{msg_id}.{timestamp}.".encode() + body
        digest = hmac.new(KEY, signed, hashlib.sha256).digest()
        expected = b"v1," + base64.b64encode(digest)
        return any(hmac.compare_digest(given.encode(), expected)
                   for given in headers.get("webhook-signature", "").split(" "))
    except ValueError:  # a header that cannot be encoded: not ours
        return False

# Flask: from_the_proxy(request.get_data(), request.headers)
# aiohttp: from_the_proxy(await request.read(), request.headers)
# Django: from_the_proxy(request.body, request.headers)
# FastAPI/Starlette: from_the_proxy(await request.body(), request.headers)
