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
    Size,
    Statuses,
    String,
    choice,
    ref,
    text,
)
from sidecar.config.model.choices import BodyReplay, Mode, PayloadMismatch, StoreOutage
from sidecar.config.model.delivery import FILTER_SCHEMA, DeliveryConfig
from sidecar.config.model.destination import ROUTE_SEPARATOR, DestinationConfig
from sidecar.config.model.upstream import SecretRef, UpstreamConfig
from sidecar.config.presets import preset_names
from sidecar.core.bodyreplay import unsigned_id_headers
from sidecar.core.eventid import EventIdSpec
from sidecar.core.filtering import EventTypeSpec, FilterSpec
from sidecar.core.handshake import HandshakeSpec
from sidecar.core.jsonpath import JsonPath
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
    # Destinations (at least one) need queue mode, and replace upstream and delivery.
    "allOf": [{
        "if": {"required": ["destinations"],
               "properties": {"destinations": {"type": "array", "minItems": 1}}},
        "then": {"required": ["mode"], "properties": {"mode": {"const": "queue"}},
                 "not": {"anyOf": [{"required": ["upstream"]}, {"required": ["delivery"]}]}},
    }],
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
        Custom("mapping", FILTER_SCHEMA),
        "Events the app does not want: types (allow/drop globs over the event type) and when "
        "(conditions on JSON fields, all must hold). A dropped event is recorded as filtered "
        "and answered 200; it never reaches the app. See Filters in configuration.md.",
        nullable=True)
    secrets: tuple[SecretRef, ...] = setting(Custom("list", ref("secrets")), "A list; each a "
                                             "string, {env: NAME} or {file: PATH}; all are "
                                             "accepted at once (rotation).", required=True)
    destinations: tuple[DestinationConfig, ...] = setting(
        Custom("list", {"type": "array", "minItems": 1, "items": ref("destination")}),
        "Queue mode: the apps each accepted event goes to, each through a queue of its own "
        "(see providers.<key>.destinations[] and Fan-out in configuration.md); instead of "
        "upstream and delivery. Empty: the provider's upstream.", yaml_default=[])
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

    # Not keys: filled by the loader. ``routes``: a provider with destinations has one route
    # per destination, each a ProviderConfig of its own (key ``<provider>.<name>``, the
    # destination's upstream, delivery and filter); ``destination`` is set on such a route.
    routes: tuple[ProviderConfig, ...] = ()
    destination: str | None = None

    @property
    def fans_out(self) -> bool:
        """Queue mode with destinations: this provider's own queue only fans events out."""
        return bool(self.destinations)

    @property
    def provider_key(self) -> str:
        """The provider's key as apps see it (Idempotency-Key, X-Webhook-Sidecar-Provider): a
        destination's route has its provider's."""
        if self.destination is None:
            return self.key
        return self.key[:-len(self.destination) - len(ROUTE_SEPARATOR)]

    def route(self, destination: str) -> ProviderConfig | None:
        return next((r for r in self.routes if r.destination == destination), None)

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
