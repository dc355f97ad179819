"""The raw body of one delivery, hashed and parsed as JSON at most once.

One JSON decoding rule for every reader (signature plugins, event ids, handshakes, batches):
the bytes must be UTF-8 (RFC 8259 §8.1; no UTF-16/32 guessing, no byte order mark) holding one
JSON text. Anything else is "not JSON", and each reader says what that means for it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Protocol, TypeAlias

# Any value ``parse_json`` returns. A named alias, not a bare ``object``, in dataclass fields:
# mypyc's dataclasses look each field's annotation up in the module (docs/design.md,
# "Compiled modules").
JsonValue: TypeAlias = object


class NotJson(ValueError):
    """The body is not UTF-8 JSON (or is too deeply nested to parse)."""


def parse_json(raw: bytes) -> object:
    """The one decoding rule; raises ``NotJson``."""
    try:
        return json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):  # bad UTF-8 / JSON, a BOM, too many digits, too deep
        raise NotJson("body is not JSON") from None


_UNSET = object()


class Body:
    """Bytes as received plus what is derived from them, each computed on first use: a
    header-only event id never parses the body, and nothing hashes it twice."""

    __slots__ = ("_json", "_sha256", "raw")

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self._sha256: bytes | None = None
        self._json: object = _UNSET

    @classmethod
    def of(cls, body: Body | bytes) -> Body:
        return body if isinstance(body, Body) else cls(body)

    @property
    def sha256(self) -> bytes:
        if self._sha256 is None:
            self._sha256 = hashlib.sha256(self.raw).digest()
        return self._sha256

    def json(self) -> object:
        """The parsed document; raises ``NotJson`` (every time, without parsing again)."""
        if self._json is _UNSET:
            try:
                self._json = parse_json(self.raw)
            except NotJson as exc:
                self._json = exc
        if isinstance(self._json, NotJson):
            raise NotJson(str(self._json))
        return self._json

    def __len__(self) -> int:
        return len(self.raw)

    def __repr__(self) -> str:  # never the bytes: bodies stay out of logs
        return f"<Body {len(self.raw)} bytes>"


class Readable(Protocol):
    """A body arriving in pieces (aiohttp's ``StreamReader``, on either side of the proxy)."""

    async def read(self, n: int = -1, /) -> bytes: ...


async def read_bounded(stream: Readable, limit: int) -> bytes:
    """Up to ``limit`` bytes of the body; the rest is not read (the connection is then closed)."""
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = await stream.read(limit - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)
