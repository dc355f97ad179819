"""Every configuration key, declared once: its kind (type, bounds, choices), its default as
written in YAML, a line of documentation and the model field it fills.

The loader (``sidecar.config.loader``) reads the YAML by these declarations: the keys a mapping
allows, each value's kind, the defaults. The JSON Schema and the reference tables in
``docs/configuration.md`` are generated from them (``python -m sidecar.config.schema --write``).
A test checks that the fields they fill are exactly the model's (``sidecar.config.model``).

Keys are read in the order declared here, so with several mistakes the first one declared is
the one reported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from sidecar.config.kinds import (
    JSON,
    Boolean,
    Choice,
    Custom,
    Duration,
    HostPort,
    Integer,
    Kind,
    Size,
    Statuses,
    StoreURL,
    String,
    UpstreamURL,
    choice,
    ref,
    text,
)
from sidecar.config.model import (
    Config,
    LogFormat,
    LogLevel,
    MaintenanceConfig,
    PayloadMismatch,
    ProviderConfig,
    SecretRef,
    StoreConfig,
    UpstreamConfig,
)
from sidecar.config.presets import preset_names
from sidecar.core.eventid import EventIdSpec
from sidecar.core.handshake import HandshakeSpec
from sidecar.core.signing import SignatureSpec


class _NoDefault:
    def __repr__(self) -> str:
        return "NO_DEFAULT"


NO_DEFAULT: Final = _NoDefault()


@dataclass(frozen=True, slots=True)
class Key:
    """One key of a mapping.

    ``default``: as written in YAML (``NO_DEFAULT`` when it has none: the value is then
    ``None``, or the kind's error when ``required``). ``nullable``: an explicit ``null`` means
    "not set" (``None``); elsewhere it is a wrong value. ``fills``: the model field the value
    fills; ``""`` for the one named as the key, ``None`` for none (checked, not kept)."""

    kind: Kind[Any] | Nested
    doc: str
    default: object = NO_DEFAULT
    required: bool = False
    nullable: bool = False
    fills: str | None = ""

    @property
    def label(self) -> str:
        return self.kind.label

    @property
    def inline_block(self) -> Block | None:
        """A nested block without a model: its keys fill fields of this key's block's model."""
        kind = self.kind
        return kind.block if isinstance(kind, Nested) and kind.block.model is None else None

    @property
    def value_type(self) -> object:
        value_type = self.kind.value_type
        # a type form (float | None), which mypy cannot check on an object
        return value_type | None if self.nullable else value_type  # type: ignore[operator]


@dataclass(frozen=True, slots=True)
class Block:
    """A mapping with a fixed set of keys (unknown keys are errors). ``model``: the frozen
    dataclass its values fill; ``None`` when they fill fields of the enclosing block's model
    (``log.level`` → ``Config.log_level``). ``nullable``: an empty ``key:`` means "all
    defaults". ``extra``: JSON Schema for rules between its keys."""

    doc: str
    keys: Mapping[str, Key]
    model: type | None = None
    nullable: bool = False
    extra: JSON = field(default_factory=dict)
    filled_by_loader: tuple[str, ...] = ()  # model fields that are not keys

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self.keys)

    def fill(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The model fields ``values`` (by key name) fill. A nested block without a model
        fills fields of this one: its value is then its own ``fill``."""
        out: dict[str, Any] = {}
        for name, key in self.keys.items():
            if key.inline_block is not None:
                out.update(values[name])
            elif key.fills is not None:
                out[key.fills or name] = values[name]
        return out

    def field_types(self) -> dict[str, object]:
        """The model fields its keys fill and their types, for the check against the model."""
        return self.fill({name: inline.field_types() if (inline := key.inline_block) else
                          key.value_type for name, key in self.keys.items()})


@dataclass(frozen=True, slots=True)
class Nested:
    """A key whose value is a block of keys."""

    block: Block
    label = "mapping"

    @property
    def value_type(self) -> object:
        return self.block.model


# --- the blocks -------------------------------------------------------------------------------

UPSTREAM: Final = Block("The app the proxy forwards to.", model=UpstreamConfig, keys={
    "url": Key(UpstreamURL(), "The app, http://… or https://…; the request's path and query are "
               "appended.", required=True),
    "timeout": Key(Duration(), "Total time for the app's answer (504 past it); every provider's "
                   "lease must exceed it.", "10s"),
    "connect_timeout": Key(Duration(), "Time to connect to the app.", "2s"),
    "max_connections": Key(Integer(1), "Connection pool to the app.", 100),
    "keepalive_timeout": Key(Duration(), "Idle pooled connections are closed after it; keep it "
                             "below the app server's idle timeout.", "4s"),
    "max_response_bytes": Key(Size(), "The app's response body is read up to this size: longer "
                              "ones are cut, in the answer to the provider and in the copy kept "
                              "for replay.", "64KiB"),
})

STORE: Final = Block("Where event rows live.", model=StoreConfig, nullable=True, keys={
    "url": Key(StoreURL(), "sqlite:///PATH (one host only; a relative PATH is relative to the "
               "config file's folder) or postgresql://… (any number of replicas).",
               "sqlite:///./webhook-sidecar.db"),
    "pool_min_size": Key(Integer(0), "PostgreSQL pool: connections kept open.", 1),
    "pool_max_size": Key(Integer(1), "PostgreSQL pool: at most this many connections.", 10),
    "acquire_timeout": Key(Duration(), "Waiting for a pooled connection (503 past it).", "2s"),
    "statement_timeout": Key(Duration(), "Server-side bound on each statement.", "5s"),
    "lock_timeout": Key(Duration(), "Server-side bound on waiting for a row lock.", "2s"),
    "statement_cache_size": Key(Integer(0), "Prepared statements cached per connection; 0 "
                                "behind pgbouncer in transaction mode.", 100),
    "session_settings": Key(Boolean(), "Send statement_timeout, lock_timeout and "
                            "idle_in_transaction_session_timeout as connection startup "
                            "parameters. Set false behind pgbouncer (it refuses them; set them "
                            "with ALTER ROLE instead).", True),
})

LOG: Final = Block("Logging.", nullable=True, keys={
    "level": Key(Choice(LogLevel), "Lowest level logged.", "info", fills="log_level"),
    "format": Key(Choice(LogFormat), "auto: JSON unless on a TTY.", "auto", fills="log_format"),
})

MAINTENANCE: Final = Block("Background work of each proxy process.", model=MaintenanceConfig,
                           nullable=True, keys={
    "interval": Key(Duration(positive=True), "How often retention runs and the stuck-row gauge "
                    "is refreshed.", "60s"),
    "secrets_reload_interval": Key(Duration(positive=True), "How often secret files are checked "
                                   "for changes (rotation without a restart).", "10s"),
    "retention_batch_size": Key(Integer(1), "Rows deleted per retention statement.", 500),
})

# A provider block without a preset must declare these; with one, they are merged over the
# preset's.
REQUIRED_WITHOUT_PRESET: Final = ("signature", "event_id")

PROVIDER: Final = Block(
    "One provider route; its key is part of the dedupe key.", model=ProviderConfig,
    filled_by_loader=("key",), keys={
    "preset": Key(Custom("preset name", choice(preset_names()), str), "A shipped scheme "
                  "(signature, event id, retention); keys given here are merged over it.",
                  nullable=True),
    "description": Key(String("text", {"type": "string"}), "Free text.", fills=None),
    "path": Key(String("path", text({"type": "string", "pattern": "^/[^{]*$"}),
                       "must be a literal URL path starting with '/'",
                       lambda route: route.startswith("/") and "{" not in route),
                "The route, a literal URL path such as /webhooks/stripe; unique across "
                "providers.", required=True),
    "signature": Key(Custom("mapping", {}, SignatureSpec), "The signature scheme (from the "
                     "preset, or declared here)."),
    "event_id": Key(Custom("mapping", {}, EventIdSpec), "Where the stable event id is: "
                    "{header: Name}, {json: \"$.id\"}, {composite: [...]} or {batch: {...}}."),
    "secrets": Key(Custom("list", ref("secrets"), tuple[SecretRef, ...]), "A list; each a "
                   "string, {env: NAME} or {file: PATH}; all are accepted at once (rotation).",
                   required=True),
    "lease": Key(Duration(), "How long an attempt owns the event; must exceed "
                 "upstream.timeout.", "60s"),
    "inflight_wait": Key(Duration(), "How long a duplicate waits for the in-flight outcome "
                         "before 409 (presets vary); at most the lease.", "5s"),
    "retention": Key(Duration(), "How long event rows are kept (presets: the provider's retry "
                     "window plus margin); must exceed the lease.", "7d"),
    "max_body_bytes": Key(Size(), "Larger bodies get 413 (default: the top-level "
                          "max_body_bytes)."),
    "retryable_statuses": Key(Statuses(), "App answers that leave the event failed (retried on "
                              "redelivery).", ["3xx", 408, 425, 429, "5xx"]),
    "on_payload_mismatch": Key(Choice(PayloadMismatch), "Same id, different body: answer as the "
                               "duplicate it claims to be, or 422.", "duplicate"),
    "handshake": Key(Custom("mapping", {}, HandshakeSpec), "A handshake the proxy answers itself "
                     "(e.g. Slack url_verification).", nullable=True),
    "store_payload": Key(Boolean(), "Keep the first request on the row, so an operator can "
                         "re-drive it.", False),
    "replay_nonce": Key(Custom("mapping", ref("event_id_item"), EventIdSpec), "For schemes that "
                        "sign a nonce but not the body (Mailgun): where the nonce is, as "
                        "{header: …} or {json: …}. The first body seen with a nonce is bound to "
                        "it; another body with the same nonce gets 401.", nullable=True),
    "retry_window": Key(Duration(), "How long the provider retries (from the preset); a shorter "
                        "retention is warned about.", nullable=True),
}, extra={
    "if": {"required": ["preset"], "properties": {"preset": {"type": "string"}}},
    "then": {"properties": {
        "signature": ref("signature_override"),
        "event_id": ref("event_id_override"),
        "handshake": ref("handshake_override"),
    }},
    "else": {
        "required": list(REQUIRED_WITHOUT_PRESET),
        "properties": {
            "signature": ref("signature"),
            "event_id": ref("event_id"),
            "handshake": ref("handshake"),
        },
    },
})

PROVIDER_KEY_PATTERN: Final = "^[a-z0-9][a-z0-9_-]{0,62}$"

TOP: Final = Block("webhook-sidecar configuration.", model=Config, filled_by_loader=("warnings",),
                   keys={
    "listen": Key(HostPort(), "Provider-facing listener: provider routes only.", "0.0.0.0:8080"),
    "admin_listen": Key(HostPort(), "/healthz, /readyz, /metrics and the admin API; never on "
                        "listen. In Kubernetes use 0.0.0.0:9090 so probes and Prometheus reach "
                        "it.", "127.0.0.1:9090"),
    "max_body_bytes": Key(Size(), "Larger bodies get 413 (per-provider override).", "1MiB",
                          fills=None),
    "upstream": Key(Nested(UPSTREAM), UPSTREAM.doc, required=True),
    "store": Key(Nested(STORE), STORE.doc),
    "log": Key(Nested(LOG), LOG.doc),
    "shutdown_timeout": Key(Duration(), "On SIGTERM, how long in-flight deliveries may take to "
                            "finish and record; keep it below Kubernetes "
                            "terminationGracePeriodSeconds.", "30s"),
    "body_read_timeout": Key(Duration(positive=True), "How long a sender may take to send a "
                             "request body; slower requests get 408.", "10s"),
    "maintenance": Key(Nested(MAINTENANCE), MAINTENANCE.doc),
    "admin_token": Key(String("string", text({"type": "string", "minLength": 16}),
                              "must be a string of at least 16 characters",
                              lambda token: len(token) >= 16),
                       "When set, required by the admin API (/admin/*) as a bearer token; at "
                       "least 16 characters.", nullable=True),
    "providers": Key(Custom("mapping", {
        "type": "object",
        "minProperties": 1,
        "propertyNames": {"pattern": PROVIDER_KEY_PATTERN},
        "additionalProperties": ref("provider"),
    }, tuple[ProviderConfig, ...]), "Provider routes by key (lower-case letters, digits, - and _; "
        "at most 63).", required=True),
})

# Each block under the key path its keys are documented with.
BLOCKS: Final[dict[str, Block]] = {
    "": TOP, "upstream": UPSTREAM, "store": STORE, "log": LOG, "maintenance": MAINTENANCE,
    "providers.<key>": PROVIDER,
}
