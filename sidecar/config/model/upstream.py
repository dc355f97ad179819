"""The app the proxy forwards to (``upstream:``, top level or per provider), and where a
secret came from."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from sidecar.config.declarations import block, setting
from sidecar.config.kinds import (
    Custom,
    Duration,
    Integer,
    Size,
    ref,
)
from sidecar.config.network_kinds import UpstreamURL


@dataclass(frozen=True, slots=True)
class SecretRef:
    """Where one secret came from (``inline``, ``env:NAME`` or ``file:/path``) and its key bytes
    as loaded at start-up. File secrets are re-read while running (see ``Keyring``)."""

    source: str
    key: bytes = field(repr=False)

    def __repr__(self) -> str:
        return f"SecretRef(source={self.source!r}, key=<redacted>)"

    @property
    def file(self) -> str | None:
        return self.source[len("file:"):] if self.source.startswith("file:") else None


@functools.lru_cache(maxsize=64)
def _origin(url: str) -> str:
    """``scheme://host:port`` of ``url`` (read on every forward: computed once per URL)."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
    host = parts.hostname or ""
    if ":" in host:  # IPv6
        host = f"[{host}]"
    return f"{parts.scheme.lower()}://{host}:{port}"


@block("The app the proxy forwards to; a provider's own upstream block overrides it key by "
       "key (providers.<key>.upstream).")
class UpstreamConfig:
    url: str | None = setting(UpstreamURL(), "The app, http://… or https://…; the request's "
                              "path and query are appended. Needed unless every provider sets "
                              "its own (providers.<key>.upstream.url).", nullable=True)
    timeout: float = setting(Duration(), "Total time for the app's answer (504 past it); the "
                             "lease of each provider using it must exceed it.",
                             yaml_default="10s")
    connect_timeout: float = setting(Duration(), "Time to connect to the app.",
                                     yaml_default="2s")
    max_connections: int = setting(Integer(1), "Connection pool to the app.", yaml_default=100)
    keepalive_timeout: float = setting(Duration(), "Idle pooled connections are closed after it; "
                                       "keep it below the app server's idle timeout.",
                                       yaml_default="4s")
    max_response_bytes: int = setting(Size(), "The app's response body is read up to this size: "
                                      "longer ones are cut, in the answer to the provider and in "
                                      "the copy kept for replay.", yaml_default="64KiB")
    signing_secrets: tuple[SecretRef, ...] = setting(
        Custom("list", {"type": "array", "items": ref("secret")}),
        "Forward authentication: each forward (and re-drive) is signed in the Standard "
        "Webhooks format (webhook-id, webhook-timestamp, "
        "webhook-signature), so the app can verify that it came through the proxy. A list; "
        "each a string, {env: NAME} or {file: PATH} holding a whsec_ secret (base64 of at "
        "least 24 random bytes); every one signs (rotation). Empty: forwards are not signed.",
        yaml_default=[])

    @property
    def origin(self) -> str:
        """``scheme://host:port`` of the app, never a path or credentials: how metrics and logs
        name the upstream a delivery went to (empty while the URL is unset)."""
        return "" if self.url is None else _origin(self.url)

    @property
    def redacted_url(self) -> str:
        """``url`` with any credentials in it replaced by ``***``, for output."""
        parts = urlsplit(self.target)
        if parts.username is None and parts.password is None:
            return self.target
        return parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]).geturl()

    @property
    def target(self) -> str:
        """The URL forwards go to; only a provider's upstream is sure to have one (the loader
        refuses a provider without)."""
        if self.url is None:
            raise ValueError("upstream.url is not set")
        return self.url
