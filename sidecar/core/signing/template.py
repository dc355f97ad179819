"""The message a declarative scheme signs (``signature.message``): a template of literal text
and placeholders, parsed once from config and filled from each delivery."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sidecar.core.errors import ConfigError, VerificationError
from sidecar.core.fields import is_header_name
from sidecar.core.headers import header_value
from sidecar.core.signing.delivery import Delivery


@dataclass(frozen=True, slots=True)
class Part:
    """One piece of the signed message: ``text`` (``data`` holds its UTF-8), ``body``,
    ``timestamp``, ``header`` (``name`` is the header), ``url`` (the configured public URL)
    or ``method`` (the request's HTTP method)."""

    kind: str
    data: bytes = b""
    name: str = ""


@dataclass(frozen=True, slots=True)
class MessageTemplate:
    source: str
    parts: tuple[Part, ...] = field(repr=False)

    @property
    def uses_timestamp(self) -> bool:
        return any(part.kind == "timestamp" for part in self.parts)

    @property
    def uses_url(self) -> bool:
        return any(part.kind == "url" for part in self.parts)


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
            parts.append(Part("text", text.encode("utf-8")))

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
            parts.append(Part(name))
        elif name.startswith("header:") and is_header_name(name[7:]):
            parts.append(Part("header", name=name[7:]))
        else:
            hint = "use {body}, {timestamp}, {header:Name}, {url} or {method}"
            raise ConfigError(path, f"unknown placeholder {{{name}}}; {hint}")
    literal.append(text[position:])
    flush()
    if not any(part.kind == "body" for part in parts):
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
        if part.kind == "body":
            chunks.append(delivery.body)
        elif part.kind == "timestamp":
            if timestamp is None:  # the spec parser forbids this; keep the failure typed
                raise VerificationError("missing_timestamp")
            chunks.append(_surrogate_safe(timestamp, "timestamp"))
        elif part.kind == "header":
            value = header_value(delivery.headers, part.name)
            if value is None:
                raise VerificationError("missing_header", f"signed header {part.name} is absent")
            chunks.append(_surrogate_safe(value, f"header {part.name}"))
        elif part.kind == "method":
            chunks.append(_surrogate_safe(delivery.method, "method"))
        elif part.kind == "url":
            if url is None:  # the spec parser requires signature.url; keep the failure typed
                raise VerificationError("missing_url", "no public URL configured")
            chunks.append(_surrogate_safe(url, "url"))
        else:
            chunks.append(part.data)
    return b"".join(chunks)
