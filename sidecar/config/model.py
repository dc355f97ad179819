"""The validated configuration: frozen values, parsed once at start-up. Secrets never appear in a
``repr``."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

from sidecar.core.eventid import EventIdSpec
from sidecar.core.handshake import HandshakeSpec
from sidecar.core.signing import SignatureSpec


@dataclass(frozen=True, slots=True)
class Address:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


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


@dataclass(frozen=True, slots=True)
class UpstreamConfig:
    url: str
    timeout: float
    connect_timeout: float
    max_connections: int
    keepalive_timeout: float
    max_response_bytes: int


@dataclass(frozen=True, slots=True)
class StoreConfig:
    url: str = field(repr=False)  # may carry a password
    pool_min_size: int
    pool_max_size: int
    acquire_timeout: float
    statement_timeout: float
    lock_timeout: float
    statement_cache_size: int
    session_settings: bool = True  # false behind pgbouncer

    @property
    def kind(self) -> str:
        return "sqlite" if self.url.startswith("sqlite:") else "postgresql"

    @property
    def sqlite_path(self) -> str:
        """``sqlite:///relative.db`` → ``relative.db``; ``sqlite:////abs/x.db`` → ``/abs/x.db``."""
        return self.url[len("sqlite:///") :]

    @property
    def redacted_url(self) -> str:
        parts = urlsplit(self.url)
        if parts.password:
            netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
            return parts._replace(netloc=netloc).geturl()
        return self.url

    def __repr__(self) -> str:
        return f"StoreConfig(url={self.redacted_url!r}, pool_max_size={self.pool_max_size})"


@dataclass(frozen=True, slots=True)
class ProviderConfig:
    key: str
    path: str
    preset: str | None
    signature: SignatureSpec
    event_id: EventIdSpec
    secrets: tuple[SecretRef, ...]
    lease: float
    inflight_wait: float
    retention: float
    max_body_bytes: int
    retryable_statuses: frozenset[int]
    on_payload_mismatch: str  # "duplicate" (answer as the duplicate it claims to be) or "reject"
    handshake: HandshakeSpec | None
    store_payload: bool = False  # keep the first request on the row, for re-driving
    retry_window: float | None = None  # how long the provider retries (from its preset)
    replay_nonce: EventIdSpec | None = None  # a signed nonce bound to the first body (Mailgun)

    @property
    def keys(self) -> tuple[bytes, ...]:
        return tuple(secret.key for secret in self.secrets)


@dataclass(frozen=True, slots=True)
class MaintenanceConfig:
    interval: float  # how often retention runs and the stuck-row gauge is refreshed
    retention_batch_size: int  # rows deleted per statement
    secrets_reload_interval: float  # how often secret files are checked for changes


@dataclass(frozen=True, slots=True)
class Config:
    listen: Address
    admin_listen: Address
    upstream: UpstreamConfig
    store: StoreConfig
    providers: tuple[ProviderConfig, ...]
    shutdown_timeout: float
    log_level: str
    log_format: str  # auto | json | console
    maintenance: MaintenanceConfig = MaintenanceConfig(60.0, 500, 10.0)
    admin_token: str | None = field(default=None, repr=False)  # required by /admin/* if set
    body_read_timeout: float = 10.0
    warnings: tuple[str, ...] = ()

    @property
    def max_body_bytes(self) -> int:
        return max(p.max_body_bytes for p in self.providers)

    def provider(self, key: str) -> ProviderConfig | None:
        return next((p for p in self.providers if p.key == key), None)
