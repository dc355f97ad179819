"""Traces (``tracing:``) and notifications for people (``notify:``)."""

from __future__ import annotations

from enum import StrEnum

from sidecar.config.declarations import block, nested, setting
from sidecar.config.kinds import (
    Boolean,
    Choice,
    Custom,
    Duration,
    Integer,
    Ratio,
    String,
    StringMap,
    ref,
)
from sidecar.config.model.upstream import SecretRef
from sidecar.config.network_kinds import TracingURL
from sidecar.config.notify_kinds import NoticeKinds, NotifyURL
from sidecar.core.notices import NoticeKind


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
