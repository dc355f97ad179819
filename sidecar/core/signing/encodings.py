"""Text forms: how signature bytes are written in a header (``ENCODINGS``) and how a configured
secret's text becomes key bytes (``SECRET_DECODERS``). A new form is one entry."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from dataclasses import dataclass, field


def _hex_decode(text: str) -> bytes:
    # unhexlify, unlike bytes.fromhex, rejects embedded whitespace. Both cases are accepted:
    # the decoded bytes are what is compared.
    return binascii.unhexlify(text.encode("ascii"))


def _base64_decode(text: str) -> bytes:
    # Standard alphabet, padded or not; validate=True rejects any other character.
    data = text.encode("ascii")
    return base64.b64decode(data + b"=" * (-len(data) % 4), validate=True)


@dataclass(frozen=True, slots=True)
class Codec:
    """Text form of signature bytes. ``decode`` raises ``ValueError`` on malformed text."""

    name: str
    encode: Callable[[bytes], str] = field(repr=False)
    decode: Callable[[str], bytes] = field(repr=False)


ENCODINGS: dict[str, Codec] = {
    "hex": Codec("hex", bytes.hex, _hex_decode),
    "base64": Codec("base64", lambda raw: base64.b64encode(raw).decode("ascii"), _base64_decode),
    # The header value as text (the `token` algorithm). Undecodable text cannot match.
    "utf8": Codec("utf8", lambda raw: raw.decode("utf-8"), lambda text: text.encode("utf-8")),
}

# How the configured secret text becomes key bytes; each raises ValueError on bad input.
SECRET_DECODERS: dict[str, Callable[[str], bytes]] = {
    "utf8": lambda text: text.encode("utf-8"),
    "base64": _base64_decode,
    "hex": _hex_decode,
}

