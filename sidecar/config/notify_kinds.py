"""Kinds of the ``notify:`` block's values: a target's URL and the notice kinds it wants (see
``kinds.py`` for what a kind is)."""

from __future__ import annotations

from dataclasses import dataclass

from sidecar.config.kinds import JSON, text
from sidecar.config.network_kinds import HTTP_URL_PATTERN, http_url
from sidecar.config.problems import did_you_mean
from sidecar.core.errors import ConfigError
from sidecar.core.notices import NoticeKind


@dataclass(frozen=True)
class NotifyURL:
    """Where a target's messages go: http(s)://host…, kept as written (a Slack incoming-webhook
    URL carries its token in the path)."""

    label = "URL"

    def schema(self) -> JSON:
        return text({"type": "string", "pattern": HTTP_URL_PATTERN})

    def parse(self, raw: object, path: str) -> str:
        return http_url(raw, path, "must be an http:// or https:// URL with a host")


@dataclass(frozen=True)
class NoticeKinds:
    """A list of notice kinds (``breaker.opened``, …), none twice."""

    label = "list"

    def schema(self) -> JSON:
        return {"type": "array", "uniqueItems": True,
                "items": text({"enum": [kind.value for kind in NoticeKind]})}

    def parse(self, raw: object, path: str) -> frozenset[NoticeKind]:
        if not isinstance(raw, list):
            raise ConfigError(path, "must be a list of notice kinds ("
                              + ", ".join(kind.value for kind in NoticeKind) + ")")
        values = [kind.value for kind in NoticeKind]
        for i, item in enumerate(raw):
            if item not in values:
                suggestion = did_you_mean(item, values) if isinstance(item, str) else None
                hint = f"; did you mean {suggestion}?" if suggestion else ""
                raise ConfigError(f"{path}[{i}]", f"must be one of {', '.join(values)}{hint}")
        return frozenset(NoticeKind(item) for item in raw)
