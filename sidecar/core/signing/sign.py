"""Produce the headers a provider would send, so that ``verify`` accepts the delivery.

Used by the demo and the ``send`` command. Tests check it against the providers' own SDK
verifiers, never only against ``verify``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from sidecar.core.errors import VerificationError
from sidecar.core.signing.spec import SignatureSpec
from sidecar.core.signing.verify import signed_message


def sign(
    spec: SignatureSpec, key: bytes, body: bytes, headers: Mapping[str, str], now: float
) -> dict[str, str]:
    """Return the signature header (and the timestamp header, if the scheme has one).

    ``{header:X}`` placeholders are read from ``headers``; a missing one is the caller's
    mistake and raises ``ValueError``.
    """
    added: dict[str, str] = {}
    timestamp: str | None = None
    if spec.timestamp is not None:
        ticks = math.floor(now * 1000) if spec.timestamp.unit == "ms" else math.floor(now)
        timestamp = str(ticks)
        if spec.timestamp.header is not None:
            added[spec.timestamp.header] = timestamp
    try:
        message = signed_message(spec.message, body, timestamp, {**headers, **added})
    except VerificationError as exc:
        raise ValueError(f"cannot sign: {exc.detail or exc.reason}") from None
    signature = spec.encoding.encode(spec.algorithm.sign(key, message))
    added[spec.header] = spec.format.render(signature, timestamp)
    return added
