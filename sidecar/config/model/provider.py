"""One provider route (``providers.<key>``) with its queue mode, circuit breaker and delivery
limits."""

from __future__ import annotations

from typing import Final

from sidecar.config.declarations import block, fieldless, inheriting, nested, setting
from sidecar.config.kinds import (
    Boolean,
    Choice,
    Custom,
    Duration,
    Integer,
    RateKind,
    Size,
    Statuses,
    String,
    choice,
    ref,
    text,
)
from sidecar.config.model.choices import BodyReplay, Mode, PayloadMismatch, StoreOutage
from sidecar.config.model.upstream import SecretRef, UpstreamConfig
from sidecar.config.presets import preset_names
from sidecar.core.bodyreplay import unsigned_id_headers
from sidecar.core.eventid import EventIdSpec
from sidecar.core.filtering import EventTypeSpec, FilterSpec
from sidecar.core.handshake import HandshakeSpec
from sidecar.core.jsonpath import JsonPath
from sidecar.core.rates import Rate
from sidecar.core.signing import SignatureSpec


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
