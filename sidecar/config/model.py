"""The validated configuration: frozen values, parsed once at start-up. Secrets never appear in a
``repr``.

Each field declares the YAML key it is filled from — its kind, default and documentation —
with ``setting`` (see ``sidecar.config.declarations``): the loader reads the file by these
declarations, in the order written, and the JSON Schemas and the reference tables in
``docs/configuration.md`` are generated from them (``python -m sidecar.config.schema --write``).
The choices are ``StrEnum``s: they compare equal to their YAML text
(``provider.on_payload_mismatch == "reject"``)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final
from urllib.parse import urlsplit

from sidecar.config.declarations import block, fieldless, group, inheriting, nested, setting
from sidecar.config.kinds import (
    Boolean,
    Choice,
    Custom,
    Duration,
    Integer,
    ProcessCount,
    RateKind,
    Ratio,
    Size,
    SizeOrZero,
    Statuses,
    String,
    StringMap,
    choice,
    ref,
    text,
)
from sidecar.config.network_kinds import Address as Address  # re-exported: a HostPort's value
from sidecar.config.network_kinds import HostPort, Networks, StoreURL, TracingURL, UpstreamURL
from sidecar.config.notify_kinds import NoticeKinds, NotifyURL
from sidecar.config.presets import preset_names
from sidecar.core.bodyreplay import unsigned_id_headers
from sidecar.core.eventid import EventIdSpec
from sidecar.core.filtering import EventTypeSpec, FilterSpec
from sidecar.core.forwarded import Network
from sidecar.core.handshake import HandshakeSpec
from sidecar.core.jsonpath import JsonPath
from sidecar.core.notices import NoticeKind
from sidecar.core.rates import Rate
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


class BodyReplay(StrEnum):
    """What a verified body gets when it was already seen under another event id."""

    REJECT = "reject"  # 401 replayed_body
    ALLOW = "allow"  # handled by its (new) event id like any delivery


class Mode(StrEnum):
    """How a provider's deliveries reach the app."""

    FORWARD = "forward"  # forwarded while the provider waits; the app's answer is relayed
    QUEUE = "queue"  # stored durably and answered 200 at once; delivery workers forward it


class StoreOutage(StrEnum):
    """What a verified delivery gets when the store cannot be reached at its claim."""

    REFUSE = "refuse"  # 503 with Retry-After: the provider retries later (dedupe kept)
    FORWARD = "forward"  # forwarded without a claim, marked unclaimed (dedupe given up)


class ResultCommit(StrEnum):
    """Whether a result write's commit waits for its WAL flush (PostgreSQL)."""

    WAIT = "wait"  # durable when answered, like every other write
    NO_WAIT = "no_wait"  # synchronous_commit = off: a server crash may lose it (a re-forward)


class StoreKind(StrEnum):
    SQLITE = "sqlite"  # one host only
    POSTGRESQL = "postgresql"  # any number of replicas
    MYSQL = "mysql"  # MySQL 8 or MariaDB 10.6+: any number of replicas


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


@block("PostgreSQL: the event, attempt and nonce tables range-partitioned by time, so that "
       "retention drops whole partitions instead of deleting rows one by one (see "
       "docs/operations.md, Partitioned retention). Set before `webhook-sidecar migrate` on a new "
       "database; an existing one is moved with `webhook-sidecar store partition`.",
       nullable=True)
class PartitioningConfig:
    interval: float | None = setting(Duration(positive=True), "The span of one partition, e.g. "
                                     "1d (at least 1m). Empty: unpartitioned, the default; the "
                                     "database must match (the proxy refuses to start and "
                                     "names the command that fixes it).", nullable=True)
    ahead: int = setting(Integer(1), "Partitions kept ready past the current one, created by "
                         "maintenance and at start-up (an insert past the last one lands in "
                         "the DEFAULT partition, counted and logged). Each is made in a short "
                         "transaction of its own whose lock wait gives up after 20 ms (tried "
                         "five times, then by the next run).", yaml_default=3)


@block("Where event rows live.", nullable=True)
class StoreConfig:
    url: str = setting(StoreURL(), "sqlite:///PATH (one host only; a relative PATH is relative to "
                       "the config file's folder), postgresql://… or mysql://… / mariadb://… "
                       "(MySQL 8, MariaDB 10.6+; the [mysql] extra): any number of replicas.",
                       yaml_default="sqlite:///./webhook-sidecar.db",
                       repr=False)  # may carry a password
    pool_min_size: int = setting(Integer(0), "PostgreSQL pool: connections kept open.",
                                 yaml_default=1)
    pool_max_size: int = setting(Integer(1), "PostgreSQL pool: at most this many connections.",
                                 yaml_default=10)
    acquire_timeout: float = setting(Duration(), "PostgreSQL: longest wait for a pooled "
                                     "connection, within statement_timeout (503 past it).",
                                     yaml_default="2s")
    statement_timeout: float = setting(Duration(), "PostgreSQL: deadline of each store call, "
                                       "from its wait for a connection to its answer, lock "
                                       "waits and one repeat on a new connection included; "
                                       "past it the call is cancelled (503). Also the "
                                       "server's statement_timeout. 0: none.",
                                       yaml_default="5s")
    lock_timeout: float = setting(Duration(), "PostgreSQL's lock_timeout: the longest wait for "
                                  "each lock a statement needs (a row queued behind another "
                                  "waiter costs two; statement_timeout bounds the call). A "
                                  "takeover or result write gives up on an event row another "
                                  "session holds after 100ms (or this, if shorter).",
                                  yaml_default="2s")
    statement_cache_size: int = setting(Integer(0), "Prepared statements cached per connection; "
                                        "0 behind pgbouncer in transaction mode.",
                                        yaml_default=100)
    notify: bool = setting(Boolean(), "PostgreSQL, queue mode: wake the delivery workers of "
                           "other replicas with LISTEN/NOTIFY (one dedicated connection per "
                           "process). Set false behind pgbouncer in transaction mode, which "
                           "cannot hold a LISTEN: workers then find new work by polling every "
                           "queue.poll_interval.", yaml_default=True)
    session_settings: bool = setting(Boolean(), "Send statement_timeout, lock_timeout and "
                                     "idle_in_transaction_session_timeout as connection startup "
                                     "parameters. Set false behind pgbouncer (it refuses them; "
                                     "set them with ALTER ROLE instead).", yaml_default=True)
    result_commit: ResultCommit = setting(
        Choice(ResultCommit),
        "PostgreSQL: wait: the app's answer is recorded durably before the provider gets it. "
        "no_wait (an opt-in: one WAL flush less per delivery): result writes, and queue mode's "
        "settles, commit without waiting for their WAL flush (synchronous_commit = off, on a "
        "pool of their own of up to pool_max_size connections); if the database server crashes "
        "within ~0.6 s of one, it is lost: the row stays processing (stuck; the app has the "
        "event) and a redelivery after the lease is forwarded again. Claims always wait. Not "
        "available on SQLite, nor with session_settings: false.",
        yaml_default="wait")
    partitioning: PartitioningConfig = nested(PartitioningConfig)

    @property
    def kind(self) -> StoreKind:
        if self.url.startswith("sqlite:"):
            return StoreKind.SQLITE
        if self.url.lower().startswith(("mysql:", "mariadb:")):
            return StoreKind.MYSQL
        return StoreKind.POSTGRESQL

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


@block("Queue mode (mode: queue): how delivery workers forward accepted events to the app.",
       nullable=True)
class QueueConfig:
    max_attempts: int = setting(Integer(1), "Attempts that may have reached the app before the "
                                "event is dead (dead-lettered); tries that could not connect "
                                "to the app do not count.", yaml_default=20)
    max_age: float = setting(Duration(positive=True), "An event still not delivered this long "
                             "after it was queued (or re-driven) is dead after its next "
                             "failed try.", yaml_default="3d")
    first_retry: float = setting(Duration(positive=True), "Backoff: the delay before the second "
                                 "attempt; each next one doubles, with jitter (half to all of "
                                 "it). Also the shortest wait an app's Retry-After gets.",
                                 yaml_default="1s")
    max_retry_delay: float = setting(Duration(positive=True), "Backoff: the longest delay "
                                     "between attempts; also bounds an app's Retry-After.",
                                     yaml_default="1h")
    concurrency: int = setting(Integer(1), "Forwards of this provider in flight at once, per "
                               "process.", yaml_default=10)
    order_key: JsonPath | None = setting(
        Custom("JSON path", {"type": "string"}),
        "A JSON path of the body (e.g. $.data.object.id): events with the same value reach the "
        "app one at a time, in the order accepted; events without it, or with other values, "
        "go in parallel. A dead event no longer holds back its key.", nullable=True)
    max_queue_depth: int | None = setting(Integer(1), "Events waiting or in flight at most; "
                                          "past it new deliveries get 503 with Retry-After "
                                          "(the provider keeps them). Empty: no limit.",
                                          nullable=True)
    poll_interval: float = setting(Duration(positive=True), "How often each process looks for "
                                   "due work without being woken (retries coming due, other "
                                   "replicas' events when store.notify is off).",
                                   yaml_default="1s")


@block("A circuit breaker: after `failures` failed attempts within `window` the provider's "
       "deliveries pause themselves; after `cooldown` one probe decides whether they resume. "
       "Off while failures is empty.", nullable=True)
class BreakerConfig:
    failures: int | None = setting(Integer(1), "Failed attempts (the app unreachable, timed "
                                   "out, or answering 5xx or 429) within the window that open "
                                   "the breaker. Empty: no breaker.", nullable=True)
    window: float = setting(Duration(positive=True), "How far back failed attempts count.",
                            yaml_default="1m")
    cooldown: float = setting(Duration(positive=True), "How long the breaker stays open "
                              "before one probe is let through.", yaml_default="30s")


@block("How fast and how many at once this provider's events may reach the app, across every "
       "process and replica sharing the store.", nullable=True)
class DeliveryConfig:
    rate: Rate | None = setting(RateKind(), "Events forwarded to the app at most, e.g. 20/s or "
                                "600/m. Queue mode: workers wait for their turn; forward "
                                "mode: a delivery over it gets 429 with Retry-After. Empty: "
                                "no limit.", nullable=True)
    burst: int | None = setting(Integer(1), "Events that may go at once above the rate after "
                                "a quiet spell (a token bucket's size). Empty: one second's "
                                "worth of the rate, at least 1.", nullable=True)
    concurrency: int | None = setting(Integer(1), "Queue mode: forwards in flight at once "
                                      "across every process (queue.concurrency bounds each "
                                      "process). Empty: no limit.", nullable=True)
    breaker: BreakerConfig = nested(BreakerConfig)


_GLOBS: Final = {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}}
_SCALAR: Final = {"type": ["string", "number", "boolean", "null"]}
_FILTER_SCHEMA: Final = {
    "type": "object", "additionalProperties": False, "minProperties": 1,
    "properties": {
        "types": {"type": "object", "additionalProperties": False, "minProperties": 1,
                  "properties": {"allow": _GLOBS, "drop": _GLOBS}},
        "when": {"type": "array", "minItems": 1, "items": {
            "type": "object", "additionalProperties": False, "required": ["path"],
            "minProperties": 2, "maxProperties": 2,
            "properties": {"path": {"type": "string", "pattern": "^\\$"},
                           "equals": _SCALAR,
                           "in": {"type": "array", "minItems": 1, "items": _SCALAR},
                           "exists": {"type": "boolean"}}}},
    },
}

# A provider block without a preset must declare these; with one, they are merged over the
# preset's.
REQUIRED_WITHOUT_PRESET: Final = ("signature", "event_id")


@block("One provider route; its key is part of the dedupe key.", extra={
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
class ProviderConfig:
    key: str  # not a key of the block: its name under ``providers``
    preset: str | None = setting(Custom("preset name", choice(preset_names())), "A shipped "
                                 "scheme (signature, event id, retention); keys given here are "
                                 "merged over it.", nullable=True)
    _description = fieldless(String("text", {"type": "string"}), "Free text.")
    path: str = setting(String("path", text({"type": "string", "pattern": "^/[^{]*$"}),
                               "must be a literal URL path starting with '/'",
                               lambda route: route.startswith("/") and "{" not in route),
                        "The route, a literal URL path such as /webhooks/stripe; unique across "
                        "providers.", required=True)
    signature: SignatureSpec = setting(Custom("mapping", {}), "The signature scheme (from the "
                                       "preset, or declared here).")
    event_id: EventIdSpec = setting(Custom("mapping", {}), "Where the stable event id is: "
                                    "{header: Name}, {json: \"$.id\"}, {composite: [...]} or "
                                    "{batch: {...}}.")
    event_type: EventTypeSpec | None = setting(
        Custom("mapping", {"type": "object", "additionalProperties": False,
                           "properties": {"header": {"anyOf": [
                               {"type": "string"}, {"type": "array", "items": {"type": "string"},
                                                    "minItems": 1}]},
                                          "json": {"type": "string", "pattern": "^\\$"}},
                           "minProperties": 1, "maxProperties": 1}),
        "Where the event's type is (what filter.types matches): {header: Name} or {json: "
        "\"$.type\"} (relative to the item for a batch provider). Set by most presets.",
        nullable=True)
    filter: FilterSpec | None = setting(
        Custom("mapping", _FILTER_SCHEMA),
        "Events the app does not want: types (allow/drop globs over the event type) and when "
        "(conditions on JSON fields, all must hold). A dropped event is recorded as filtered "
        "and answered 200; it never reaches the app. See Filters in configuration.md.",
        nullable=True)
    secrets: tuple[SecretRef, ...] = setting(Custom("list", ref("secrets")), "A list; each a "
                                             "string, {env: NAME} or {file: PATH}; all are "
                                             "accepted at once (rotation).", required=True)
    upstream: UpstreamConfig = inheriting(
        UpstreamConfig, "upstream", "The app this provider's deliveries go to (forwards, queue "
        "deliveries, take-overs, re-drives): the top-level upstream with each key given here "
        "replacing its own; keys left out are the top level's.")
    lease: float = setting(Duration(), "How long an attempt owns the event; must exceed "
                           "the provider's upstream.timeout.", yaml_default="60s")
    inflight_wait: float = setting(Duration(), "How long a duplicate waits for the in-flight "
                                   "outcome before 409 (presets vary); at most the lease.",
                                   yaml_default="5s")
    retention: float = setting(Duration(), "How long event rows are kept (presets: the "
                               "provider's retry window plus margin); must exceed the lease. On a "
                               "partitioned store, rows may stay until their partition is "
                               "dropped: at most one interval plus the longest retention.",
                               yaml_default="7d")
    max_body_bytes: int = setting(Size(), "Larger bodies get 413 (default: the top-level "
                                  "max_body_bytes).")
    final_statuses: frozenset[int] = setting(Statuses(), "Non-2xx app answers that end the "
                                             "event done, recorded and replayed (e.g. [400, "
                                             "422]); by default only a 2xx does, so every other "
                                             "answer leaves it failed and the provider's retry "
                                             "reaches the app.", yaml_default=[])
    on_payload_mismatch: PayloadMismatch = setting(Choice(PayloadMismatch), "Same id, different "
                                                   "body: answer as the duplicate it claims to "
                                                   "be, or 422.", yaml_default="duplicate")
    on_body_replay: BodyReplay | None = setting(
        Choice(BodyReplay), "A verified body already seen (within retention) under another "
        "event id: reject (401 replayed_body) or allow. Default: reject where the event id is "
        "a header the signature does not cover (GitHub, Shopify, Linear, …: resending a "
        "captured body under a fresh id would otherwise be a new event), allow elsewhere.",
        nullable=True)
    handshake: HandshakeSpec | None = setting(Custom("mapping", {}), "A handshake the proxy "
                                              "answers itself (e.g. Slack url_verification).",
                                              nullable=True)
    store_payload: bool = setting(Boolean(), "Keep the first request on the row, so an operator "
                                  "can re-drive it.", yaml_default=False)
    mode: Mode = setting(Choice(Mode), "forward: the provider waits while the app is reached and "
                         "gets its answer. queue: a verified event is stored with its request "
                         "and answered 200 at once; delivery workers forward it with their own "
                         "retries (see queue).", yaml_default="forward")
    queue: QueueConfig = nested(QueueConfig)
    delivery: DeliveryConfig = nested(DeliveryConfig)
    store_outage: StoreOutage = setting(
        Choice(StoreOutage), "When the store cannot be reached at a delivery's claim: refuse "
        "(503 with Retry-After; the provider retries) or forward (forward mode only: the "
        "verified delivery is forwarded without a claim, marked X-Webhook-Sidecar-Unclaimed: "
        "true, giving up dedupe for the outage).", yaml_default="refuse")
    replay_nonce: EventIdSpec | None = setting(Custom("mapping", ref("event_id_item")), "For "
                                               "schemes that sign a nonce but not the body "
                                               "(Mailgun): where the nonce is, as {header: …} or "
                                               "{json: …}. The first body seen with a nonce is "
                                               "bound to it; another body with the same nonce "
                                               "gets 401.", nullable=True)
    retry_window: float | None = setting(Duration(), "How long the provider retries (from the "
                                         "preset); a shorter retention is warned about.",
                                         nullable=True)
    retries: bool = setting(Boolean(), "Whether the provider sends a delivery again when it "
                            "was not answered 2xx (from the preset; GitHub, GitLab and Discord "
                            "do not). Pausing a forward-mode provider that does not retry drops "
                            "its deliveries, so it needs --force.", yaml_default=True)

    @property
    def guards_body_replay(self) -> bool:
        """Whether a body seen under another event id is refused (``core.bodyreplay``)."""
        if self.on_body_replay is None:
            return bool(unsigned_id_headers(self.signature, self.event_id))
        return self.on_body_replay is BodyReplay.REJECT

    @property
    def key_bytes(self) -> tuple[bytes, ...]:
        """The secrets' key bytes as loaded at start-up (``Keyring`` has the current ones)."""
        return tuple(secret.key for secret in self.secrets)


@block("Background work of each proxy process.", nullable=True)
class MaintenanceConfig:
    interval: float = setting(Duration(positive=True), "How often retention runs and the "
                              "stuck-row and queue gauges are refreshed (the queue gauges "
                              "also on each /metrics scrape, at most every 5 s).",
                              yaml_default="60s")
    secrets_reload_interval: float = setting(Duration(positive=True), "How often secret files "
                                             "are checked for changes (rotation without a "
                                             "restart).", yaml_default="10s")
    retention_batch_size: int = setting(Integer(1), "Rows deleted per retention statement.",
                                        yaml_default=500)


class Sampler(StrEnum):
    """OpenTelemetry's sampler names (``OTEL_TRACES_SAMPLER``)."""

    ALWAYS_ON = "always_on"
    ALWAYS_OFF = "always_off"
    TRACEIDRATIO = "traceidratio"
    PARENTBASED_ALWAYS_ON = "parentbased_always_on"
    PARENTBASED_ALWAYS_OFF = "parentbased_always_off"
    PARENTBASED_TRACEIDRATIO = "parentbased_traceidratio"


@block("OpenTelemetry traces, exported over OTLP/HTTP (needs the otel extra). Each key left "
       "empty falls back to its standard OTEL_* environment variable.", nullable=True)
class TracingConfig:
    enabled: bool | None = setting(Boolean(), "true: on; false: off, whatever the environment "
                                   "says. Empty: on when an endpoint is set, here or in "
                                   "OTEL_EXPORTER_OTLP_ENDPOINT or "
                                   "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (and OTEL_SDK_DISABLED "
                                   "is not true).", nullable=True)
    endpoint: str | None = setting(TracingURL(), "The OTLP/HTTP collector, http(s)://host:port; "
                                   "spans go to its /v1/traces (OTEL_EXPORTER_OTLP_ENDPOINT).",
                                   nullable=True)
    headers: tuple[tuple[str, str], ...] = setting(
        StringMap(), "Headers sent with each export, e.g. an API key "
        "(OTEL_EXPORTER_OTLP_HEADERS).", yaml_default={}, repr=False)  # may carry a token
    service_name: str | None = setting(String("string", {"type": "string", "minLength": 1}),
                                       "service.name of the spans (OTEL_SERVICE_NAME; "
                                       "default webhook-sidecar).", nullable=True)
    resource_attributes: tuple[tuple[str, str], ...] = setting(
        StringMap(), "More resource attributes, e.g. deployment.environment.name "
        "(OTEL_RESOURCE_ATTRIBUTES; these win over it).", yaml_default={})
    sampler: Sampler | None = setting(Choice(Sampler), "Which traces are kept "
                                      "(OTEL_TRACES_SAMPLER; default parentbased_always_on).",
                                      nullable=True)
    sampler_arg: float | None = setting(Ratio(), "The ratio of the traceidratio samplers "
                                        "(OTEL_TRACES_SAMPLER_ARG; default 1).", nullable=True)
    max_queue_size: int | None = setting(Integer(1), "Finished spans waiting for export at "
                                         "most; past it spans are dropped and counted "
                                         "(webhook_trace_spans_dropped_total), never waited "
                                         "for (OTEL_BSP_MAX_QUEUE_SIZE; default 2048).",
                                         nullable=True)
    trust_inbound: bool = setting(Boolean(), "true: a delivery from a peer in trusted_proxies "
                                  "continues the trace its traceparent and tracestate headers "
                                  "name (its sampling decision too). false: every delivery "
                                  "starts a trace of its own; an ingress passes a sender's "
                                  "headers on unless told otherwise.", yaml_default=False)


class NotifyFormat(StrEnum):
    """The body a notification target receives."""

    STANDARD = "standard"  # Standard Webhooks: signed JSON
    SLACK = "slack"  # a Slack incoming webhook's {"text": …}, unsigned


@block("One notification target: a URL that receives a message when a condition starts.",
       extra={"if": {"required": ["format"], "properties": {"format": {"const": "slack"}}},
              "else": {"required": ["secret"]}})
class NotifyTarget:
    url: str = setting(NotifyURL(), "Where messages are POSTed, http:// or https://.",
                       required=True, repr=False)  # a Slack URL carries its token
    format: NotifyFormat = setting(Choice(NotifyFormat), "standard: a Standard Webhooks "
                                   "message (JSON, signed with secret). slack: a Slack "
                                   "incoming webhook's {\"text\": …}, unsigned.",
                                   yaml_default="standard")
    secret: SecretRef | None = setting(Custom("secret", ref("secret")), "The whsec_ secret "
                                       "that signs each message (a string, {env: NAME} or "
                                       "{file: PATH}); required for the standard format.",
                                       nullable=True)
    events: frozenset[NoticeKind] | None = setting(
        NoticeKinds(), "The notice kinds sent to this target (provider.paused, "
        "provider.resumed, breaker.opened, breaker.closed, dead_letters.threshold, "
        "signatures.failing). Empty: all of them.", nullable=True)
    headers: tuple[tuple[str, str], ...] = setting(
        StringMap(), "Headers sent with each message, e.g. an Authorization header.",
        yaml_default={}, repr=False)  # may carry a token

    def wants(self, kind: NoticeKind) -> bool:
        return self.events is None or kind in self.events


@block("When a provider's signature failures are a condition: count failures within window, "
       "counted in each process. Off while count is empty.", nullable=True)
class SignatureFailuresConfig:
    count: int | None = setting(Integer(1), "Deliveries answered 401 for a bad signature "
                                "within the window that start the condition. Empty: off.",
                                yaml_default=10, nullable=True)
    window: float = setting(Duration(positive=True), "How far back failures count.",
                            yaml_default="5m")


@block("Notifications for people without Prometheus: targets that receive a message when a "
       "provider is paused or resumed, its breaker opens or closes, its dead letters reach a "
       "threshold or its signatures start failing (see docs/operations.md, Notifications).",
       nullable=True)
class NotifyConfig:
    targets: tuple[NotifyTarget, ...] = setting(
        Custom("list", {"type": "array", "items": ref("notify_target")}),
        "The targets (see notify.targets[]). Empty: no notifications.", yaml_default=[])
    interval: float = setting(Duration(positive=True), "At most one message per condition, "
                              "provider and target per interval, across every replica "
                              "sharing the store.", yaml_default="15m")
    dead_letters: int | None = setting(Integer(1), "A queue-mode provider whose dead events "
                                       "reach this count is a condition (read by the "
                                       "maintenance loop). Empty: off.", yaml_default=1,
                                       nullable=True)
    signature_failures: SignatureFailuresConfig = nested(SignatureFailuresConfig)


PROVIDER_KEY_PATTERN: Final = "^[a-z0-9][a-z0-9_-]{0,62}$"


# upstream.url is needed unless every provider has its own.
_UPSTREAM_URL: Final = {"required": ["upstream"], "properties": {"upstream": {
    "type": "object", "required": ["url"], "properties": {"url": {"type": "string"}}}}}


@block("webhook-sidecar configuration.", extra={"anyOf": [
    _UPSTREAM_URL, {"properties": {"providers": {"additionalProperties": _UPSTREAM_URL}}}]})
class Config:
    listen: Address = setting(HostPort(), "Provider-facing listener: provider routes only.",
                              yaml_default="0.0.0.0:8080")
    trusted_proxies: tuple[Network, ...] = setting(
        Networks(), "Peers on listen (load balancers, ingress) whose X-Forwarded-*, Forwarded and "
        "X-Real-IP headers reach the app, with the peer appended to X-Forwarded-For; from any "
        "other peer the proxy drops them and sets X-Forwarded-For, -Proto and -Host itself.",
        yaml_default=[])
    admin_listen: Address = setting(HostPort(), "/healthz, /readyz, /metrics and the admin API; "
                                    "never on listen. In Kubernetes use 0.0.0.0:9090 so probes "
                                    "and Prometheus reach it.", yaml_default="127.0.0.1:9090")
    # Each provider's default; the property max_body_bytes below is their largest.
    _max_body_bytes = fieldless(Size(), "Larger bodies get 413 (per-provider override).",
                                yaml_default="1MiB")
    upstream: UpstreamConfig = nested(UpstreamConfig)
    store: StoreConfig = nested(StoreConfig)
    _log = group("Logging.", nullable=True)
    log_level: LogLevel = setting(Choice(LogLevel), "Lowest level logged.", yaml_default="info",
                                  key="log.level")
    log_format: LogFormat = setting(Choice(LogFormat), "auto: JSON unless on a TTY.",
                                    yaml_default="auto", key="log.format")
    shutdown_timeout: float = setting(Duration(), "On SIGTERM, how long in-flight deliveries may "
                                      "take to finish and record; the process exits at most 2s "
                                      "later. In Kubernetes keep preStop + shutdown_timeout + 2s "
                                      "within terminationGracePeriodSeconds.", yaml_default="30s")
    body_read_timeout: float = setting(Duration(positive=True), "How long a sender may take to "
                                       "send a request body; slower requests get 408.",
                                       yaml_default="10s")
    header_read_timeout: float = setting(Duration(positive=True), "How long a sender on listen "
                                         "or admin_listen may take to send a request's "
                                         "headers, from the connection's opening or from the "
                                         "first byte of a request on a kept-alive one; slower "
                                         "connections are closed.", yaml_default="10s")
    idle_timeout: float = setting(Duration(positive=True), "Kept-alive connections on listen or "
                                  "admin_listen that send no request for this long are closed; "
                                  "keep it above the idle timeout of a load balancer in front "
                                  "(and above Prometheus' scrape interval).",
                                  yaml_default="75s")
    max_connections: int = setting(Integer(1), "Open connections on listen at most. At the "
                                   "cap a new one takes the place of the connection idle "
                                   "longest, which is closed; while every one is inside a "
                                   "request, the new one is closed at once, unanswered "
                                   "(senders retry). Keep it below the open-file limit.",
                                   yaml_default=1000)
    admin_max_connections: int = setting(Integer(1), "Open connections on admin_listen at most "
                                         "(its own cap, not shared with max_connections), with "
                                         "the same rule at the cap: idle connections cannot "
                                         "lock out a probe. Probes and Prometheus need a few.",
                                         yaml_default=64)
    workers: int = setting(ProcessCount(), "Processes serving listen, each with its own store "
                           "pool and app connections (max_connections, store.pool_max_size "
                           "and upstream.max_connections apply to each); the kernel spreads "
                           "connections over them. auto: one per CPU the process may run on "
                           "(its affinity, not a cgroup quota). 1: one process, no supervisor.",
                           yaml_default=1)
    worker_timeout: float = setting(Duration(positive=True), "With workers > 1: a worker whose "
                                    "event loop has not sent its heartbeat (every fifth of "
                                    "this) for this long is killed and replaced; /healthz "
                                    "answers 503 until its successor listens. A worker "
                                    "starting has ten times this to listen.",
                                    yaml_default="5s")
    answer_cache: int = setting(SizeOrZero(), "Memory each process keeps of done events, of "
                                "events accepted in queue mode and of bodies bound by the "
                                "replay guard, so a duplicate of an event it has seen is "
                                "answered without the database; each entry ends when retention "
                                "deletes the stored fact it mirrors (its first receipt plus the "
                                "provider's retention). 0: off.",
                                yaml_default="16MiB")
    maintenance: MaintenanceConfig = nested(MaintenanceConfig)
    tracing: TracingConfig = nested(TracingConfig)
    notify: NotifyConfig = nested(NotifyConfig)
    admin_token: str | None = setting(String("string", text({"type": "string", "minLength": 16}),
                                             "must be a string of at least 16 characters",
                                             lambda token: len(token) >= 16),
                                      "When set, required by the admin API (/admin/*) as a bearer "
                                      "token; at least 16 characters.", nullable=True, repr=False)
    providers: tuple[ProviderConfig, ...] = setting(Custom("mapping", {
        "type": "object",
        "minProperties": 1,
        "propertyNames": {"pattern": PROVIDER_KEY_PATTERN},
        "additionalProperties": ref("provider"),
    }), "Provider routes by key (lower-case letters, digits, - and _; at most 63).",
        required=True)
    warnings: tuple[str, ...]  # not a key: filled by the loader
    # Not a key: the key paths of the secrets the load left unread (``loader.Secrets``): such a
    # config is for the store commands (``events``); nothing serves it
    # (``runtime.wiring.require_secrets``).
    unread_secrets: frozenset[str]

    @property
    def max_body_bytes(self) -> int:
        return max(p.max_body_bytes for p in self.providers)

    def provider(self, key: str) -> ProviderConfig | None:
        return next((p for p in self.providers if p.key == key), None)
