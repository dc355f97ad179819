"""The whole configuration (``Config``) and each process's background work
(``maintenance:``)."""

from __future__ import annotations

from typing import Final

from sidecar.config.declarations import block, fieldless, group, nested, setting
from sidecar.config.kinds import (
    Choice,
    Custom,
    Duration,
    Integer,
    ProcessCount,
    Size,
    SizeOrZero,
    String,
    ref,
    text,
)
from sidecar.config.model.choices import LogFormat, LogLevel
from sidecar.config.model.observability import NotifyConfig, TracingConfig
from sidecar.config.model.provider import ProviderConfig
from sidecar.config.model.store import StoreConfig
from sidecar.config.model.upstream import UpstreamConfig
from sidecar.config.network_kinds import Address as Address  # re-exported: a HostPort's value
from sidecar.config.network_kinds import HostPort, Networks
from sidecar.core.forwarded import Network


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



PROVIDER_KEY_PATTERN: Final = "^[a-z0-9][a-z0-9_-]{0,62}$"


# upstream.url is needed unless every provider has its own.
_UPSTREAM_URL: Final = {"required": ["upstream"], "properties": {"upstream": {
    "type": "object", "required": ["url"], "properties": {"url": {"type": "string"}}}}}


# ...or each of its destinations has its own.
_DESTINATION_URLS: Final = {"required": ["destinations"], "properties": {"destinations": {
    "minItems": 1, "items": _UPSTREAM_URL}}}


@block("webhook-sidecar configuration.", extra={"anyOf": [
    _UPSTREAM_URL, {"properties": {"providers": {"additionalProperties": {
        "anyOf": [_UPSTREAM_URL, _DESTINATION_URLS]}}}}]})
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

    @property
    def routes(self) -> tuple[ProviderConfig, ...]:
        """Every queue the store keeps: each provider's own, and each destination's
        (``stripe.billing``) after its provider's."""
        return tuple(route for p in self.providers for route in (p, *p.routes))

    @property
    def app_routes(self) -> tuple[ProviderConfig, ...]:
        """The routes whose deliveries reach an app: all but the fanning-out providers'."""
        return tuple(route for route in self.routes if not route.fans_out)

    def route(self, key: str) -> ProviderConfig | None:
        """A provider, or a destination's route by its key (``stripe.billing``)."""
        return next((r for r in self.routes if r.key == key), None)
