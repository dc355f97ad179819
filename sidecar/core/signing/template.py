"""The message a declarative scheme signs (``signature.message``): a template of literal text
and placeholders, parsed once from config and filled from each delivery."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import assert_never

from sidecar.core.errors import ConfigError, VerificationError
from sidecar.core.fields import is_header_name
from sidecar.core.headers import header_value
from sidecar.core.signing.delivery import Delivery


class PartKind(enum.StrEnum):
    """What one piece of the signed message is; a placeholder is spelled by its value."""

    TEXT = "text"  # literal text: ``Part.data`` holds its UTF-8
    BODY = "body"
    TIMESTAMP = "timestamp"
    HEADER = "header"  # ``Part.name`` is the header
    URL = "url"  # the configured public URL
    METHOD = "method"  # the request's HTTP method


@dataclass(frozen=True, slots=True)
class Part:
    """One piece of the signed message."""

    kind: PartKind
    data: bytes = b""
    name: str = ""


@dataclass(frozen=True, slots=True)
class MessageTemplate:
    source: str
    parts: tuple[Part, ...] = field(repr=False)

    @property
    def uses_timestamp(self) -> bool:
        return any(part.kind is PartKind.TIMESTAMP for part in self.parts)

    @property
    def uses_url(self) -> bool:
        return any(part.kind is PartKind.URL for part in self.parts)


_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")


def parse_template(text: str, path: str) -> MessageTemplate:
    """``{body}``, ``{timestamp}``, ``{header:Name}``, ``{url}``, ``{method}``; ``{{``/``}}``
    are literal braces."""
    parts: list[Part] = []
    literal: list[str] = []

    def flush() -> None:
        text = "".join(literal)
        literal.clear()
        if text:
            parts.append(Part(PartKind.TEXT, text.encode("utf-8")))

    position = 0
    for match in _PLACEHOLDER.finditer(text):
        literal.append(text[position : match.start()])
        position = match.end()
        token, name = match[0], match[1]
        if token in ("{{", "}}"):
            literal.append(token[0])
            continue
        if name is None:
            raise ConfigError(path, "unbalanced brace; write {{ or }} for a literal one")
        flush()
        if name in ("body", "timestamp", "url", "method"):
            parts.append(Part(PartKind(name)))
        elif name.startswith("header:") and is_header_name(name[7:]):
            parts.append(Part(PartKind.HEADER, name=name[7:]))
        else:
            hint = "use {body}, {timestamp}, {header:Name}, {url} or {method}"
            raise ConfigError(path, f"unknown placeholder {{{name}}}; {hint}")
    literal.append(text[position:])
    flush()
    if not any(part.kind is PartKind.BODY for part in parts):
        raise ConfigError(path, "must include {body}: a signature that omits it proves nothing")
    return MessageTemplate(text, tuple(parts))


def _surrogate_safe(value: str, what: str) -> bytes:
    try:
        # aiohttp decodes header bytes as UTF-8 with surrogateescape: this restores them.
        return value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raise VerificationError("bad_signature", f"{what} unusable") from None


def signed_message(
    template: MessageTemplate, delivery: Delivery, timestamp: str | None, url: str | None
) -> bytes:
    """The exact bytes the provider signed: template text, the delivery's raw body, headers
    and method, the timestamp as received and the public URL (``DeclarativeSpec.signing_url``)."""
    chunks: list[bytes] = []
    for part in template.parts:
        match part.kind:
            case PartKind.BODY:
                chunks.append(delivery.body)
            case PartKind.TIMESTAMP:
                if timestamp is None:  # the spec parser forbids this; keep the failure typed
                    raise VerificationError("missing_timestamp")
                chunks.append(_surrogate_safe(timestamp, "timestamp"))
            case PartKind.HEADER:
                value = header_value(delivery.headers, part.name)
                if value is None:
                    raise VerificationError("missing_header",
                                            f"signed header {part.name} is absent")
                chunks.append(_surrogate_safe(value, f"header {part.name}"))
            case PartKind.METHOD:
                chunks.append(_surrogate_safe(delivery.method, "method"))
            case PartKind.URL:
                if url is None:  # the spec parser requires signature.url; keep the failure typed
                    raise VerificationError("missing_url", "no public URL configured")
                chunks.append(_surrogate_safe(url, "url"))
            case PartKind.TEXT:
                chunks.append(part.data)
            case _:
                assert_never(part.kind)
    return b"".join(chunks)
