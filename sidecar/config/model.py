"""The validated configuration: frozen values, parsed once at start-up. Secrets never appear in a
``repr``.

Which YAML key fills which field is declared once, in ``sidecar.config.keys``; a test checks that
every declared key has its field here and every field its key. The choices are ``StrEnum``s: they
compare equal to their YAML text (``provider.on_payload_mismatch == "reject"``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from urllib.parse import urlsplit

from sidecar.core.eventid import EventIdSpec
from sidecar.core.handshake import HandshakeSpec
from sidecar.core.signing import SignatureSpec


class LogLevel(StrEnum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class LogFormat(StrEnum):
    AUTO = "auto"  # JSON unless on a TTY
    JSON = "json"
    CONSOLE = "console"


class PayloadMismatch(StrEnum):
    """What a delivery gets when its event id is known but its body differs."""

    DUPLICATE = "duplicate"  # answered as the duplicate it claims to be
    REJECT = "reject"  # 422


class StoreKind(StrEnum):
    SQLITE = "sqlite"  # one host only
    POSTGRESQL = "postgresql"  # any number of replicas


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
    session_settings: bool

    @property
    def kind(self) -> StoreKind:
        return StoreKind.SQLITE if self.url.startswith("sqlite:") else StoreKind.POSTGRESQL

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
    key: str  # not a key of the block: its name under ``providers``
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
    on_payload_mismatch: PayloadMismatch
    handshake: HandshakeSpec | None
    store_payload: bool
    retry_window: float | None
    replay_nonce: EventIdSpec | None

    @property
    def keys(self) -> tuple[bytes, ...]:
        return tuple(secret.key for secret in self.secrets)


@dataclass(frozen=True, slots=True)
class MaintenanceConfig:
    interval: float
    retention_batch_size: int
    secrets_reload_interval: float


@dataclass(frozen=True, slots=True)
class Config:
    listen: Address
    admin_listen: Address
    upstream: UpstreamConfig
    store: StoreConfig
    providers: tuple[ProviderConfig, ...]
    shutdown_timeout: float
    log_level: LogLevel
    log_format: LogFormat
    maintenance: MaintenanceConfig
    admin_token: str | None = field(repr=False)
    body_read_timeout: float
    warnings: tuple[str, ...]  # not a key: filled by the loader

    @property
    def max_body_bytes(self) -> int:
        return max(p.max_body_bytes for p in self.providers)

    def provider(self, key: str) -> ProviderConfig | None:
        return next((p for p in self.providers if p.key == key), None)
