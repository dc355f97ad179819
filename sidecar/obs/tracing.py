"""Whether tracing is on, and the tracer that serves it: ``NO_TRACER`` when off, else the
OpenTelemetry adapter (``sidecar.obs.otel``), imported only then, so the proxy runs without the
``otel`` extra installed. Configured by the ``tracing:`` block, each key falling back to its
standard ``OTEL_*`` environment variable (the SDK reads those itself)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from sidecar.config.model import Sampler, TracingConfig
from sidecar.core.errors import ConfigError
from sidecar.obs.metrics import Metrics

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import sampling
    from opentelemetry.sdk.trace.export import SpanExporter

    from sidecar.obs.otel import OtelTracer

ENDPOINT_VARIABLES: Final = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
DEFAULT_SERVICE_NAME: Final = "webhook-sidecar"
DEFAULT_MAX_QUEUE_SIZE: Final = 2048
DEFAULT_VALUE_LENGTH_LIMIT: Final = 4096  # characters of a string attribute (the SDK: no limit)
PROTOCOL: Final = "http/protobuf"  # the only one the exporter (``obs.otlp``) speaks
_RATIO_SAMPLERS: Final = frozenset({Sampler.TRACEIDRATIO, Sampler.PARENTBASED_TRACEIDRATIO})
# From source until a release is on PyPI; the PyPI form is printed too, marked as such.
INSTALL_HINT: Final = ("install the otel extra: pip install '.[otel]' in a source checkout "
                       "(pip install 'webhook-sidecar[otel]' once released; not yet)")


def tracing_wanted(config: TracingConfig, environ: Mapping[str, str] = os.environ) -> bool:
    """``tracing.enabled`` if set; else whether an OTLP endpoint is configured, here or in the
    environment, and neither the SDK (``OTEL_SDK_DISABLED=true``) nor its exporter
    (``OTEL_TRACES_EXPORTER=none``) is turned off."""
    if config.enabled is not None:
        return config.enabled
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return config.endpoint is not None or any(environ.get(name) for name in ENDPOINT_VARIABLES)


def why_wanted(config: TracingConfig, environ: Mapping[str, str]) -> str:
    if config.enabled:
        return "tracing.enabled is true"
    if config.endpoint is not None:
        return "tracing.endpoint is set"
    return next(f"${name} is set" for name in ENDPOINT_VARIABLES if environ.get(name))


def check_environment(config: TracingConfig, environ: Mapping[str, str] = os.environ) -> None:
    """Raises ``ConfigError``, naming the variable, when tracing is on and the environment asks
    for what the proxy cannot do (another exporter or protocol: every export would fail) or
    says it unreadably (a sampler ratio, a limit)."""
    if not tracing_wanted(config, environ):
        return
    exporters = environ.get("OTEL_TRACES_EXPORTER", "").strip()
    if exporters and [e.strip().lower() for e in exporters.split(",")] != ["otlp"]:
        raise ConfigError("tracing", f"$OTEL_TRACES_EXPORTER is {exporters!r}: the proxy "
                          "exports over OTLP only (set it to otlp or unset it; "
                          "tracing.enabled: false turns tracing off)")
    for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        protocol = environ.get(name, "").strip()
        if protocol:
            if protocol.lower() != PROTOCOL:
                raise ConfigError("tracing", f"${name} is {protocol!r}: the proxy exports OTLP "
                                  f"over {PROTOCOL} only (to the collector's HTTP port, "
                                  "usually 4318)")
            break  # the traces one wins over the general one
    _sampler_name(config, environ)
    _sampler_ratio(config, environ)
    _max_queue_size(config, environ)
    _value_length_limit(environ)


def build_tracer(config: TracingConfig, metrics: Metrics, *, db_system: str,
                 environ: Mapping[str, str] = os.environ,
                 exporter: SpanExporter | None = None) -> OtelTracer | None:
    """The OpenTelemetry tracer, exporting over OTLP/HTTP (or to ``exporter``), or None when
    tracing is off. Raises ``ConfigError`` when tracing is asked for and the ``otel`` extra is
    not installed."""
    if exporter is None and not tracing_wanted(config, environ):
        return None
    check_environment(config, environ)
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider

        from sidecar.obs.otel import SCOPE, OtelTracer
        from sidecar.obs.sdkexport import SdkExport
        from sidecar.obs.span_queue import RecordExporter, SpanQueue
        if exporter is None:
            from sidecar.obs import otlp, otlp_encode
    except ImportError as exc:
        raise ConfigError("tracing", f"{why_wanted(config, environ)}, but OpenTelemetry is not "
                          f"installed ({exc.name} is missing): {INSTALL_HINT}") from exc

    def dropped(reason: str, spans: int) -> None:
        metrics.trace_spans_dropped.labels(reason).inc(spans)

    provider = TracerProvider(resource=Resource.create(_resource(config, environ)),
                              sampler=_sampler(config, environ), shutdown_on_exit=False)
    sends: RecordExporter
    if exporter is None:
        resource = provider.resource
        encoder = otlp_encode.Encoder(resource.attributes, resource.schema_url, SCOPE,
                               unencodable=lambda spans: dropped("unencodable", spans))
        sends = otlp.from_environment(encoder, config.endpoint, dict(config.headers), environ)
    else:
        sends = SdkExport(exporter, provider)
    queue = SpanQueue(sends, max_queue_size=_max_queue_size(config, environ), dropped=dropped)
    provider.add_span_processor(queue)  # the provider's force_flush and shutdown reach it
    return OtelTracer(provider, queue, db_system,
                      value_length_limit=_value_length_limit(environ))


def _resource(config: TracingConfig, environ: Mapping[str, str]) -> dict[str, str]:
    """Attributes over the environment's (``Resource.create`` merges OTEL_SERVICE_NAME and
    OTEL_RESOURCE_ATTRIBUTES under them); service.name webhook-sidecar unless named anywhere."""
    attributes = dict(config.resource_attributes)
    if config.service_name is not None:
        attributes["service.name"] = config.service_name
    elif not (environ.get("OTEL_SERVICE_NAME") or "service.name=" in environ.get(
            "OTEL_RESOURCE_ATTRIBUTES", "") or "service.name" in attributes):
        attributes["service.name"] = DEFAULT_SERVICE_NAME
    return attributes


def _sampler(config: TracingConfig, environ: Mapping[str, str]) -> sampling.Sampler | None:
    """The configured sampler; None when neither key is set (the SDK reads
    OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG)."""
    from opentelemetry.sdk.trace import sampling

    if config.sampler is None and config.sampler_arg is None:
        return None
    name = _sampler_name(config, environ)
    ratio = _sampler_ratio(config, environ)
    assert name is not None  # a key is set: an unknown name raised
    samplers: dict[Sampler, sampling.Sampler] = {
        Sampler.ALWAYS_ON: sampling.ALWAYS_ON,
        Sampler.ALWAYS_OFF: sampling.ALWAYS_OFF,
        Sampler.TRACEIDRATIO: sampling.TraceIdRatioBased(ratio),
        Sampler.PARENTBASED_ALWAYS_ON: sampling.ParentBased(sampling.ALWAYS_ON),
        Sampler.PARENTBASED_ALWAYS_OFF: sampling.ParentBased(sampling.ALWAYS_OFF),
        Sampler.PARENTBASED_TRACEIDRATIO: sampling.ParentBased(
            sampling.TraceIdRatioBased(ratio)),
    }
    return samplers[name]


def _sampler_name(config: TracingConfig, environ: Mapping[str, str]) -> Sampler | None:
    """The sampler ``tracing.sampler`` or ``$OTEL_TRACES_SAMPLER`` names; None: a sampler of
    the variable's this proxy does not know, left to the SDK (only when no key is set)."""
    if config.sampler is not None:
        return config.sampler
    named = environ.get("OTEL_TRACES_SAMPLER", "").strip() or Sampler.PARENTBASED_ALWAYS_ON
    try:
        return Sampler(named)
    except ValueError:
        if config.sampler_arg is None:
            return None  # the SDK's own (an entry point's, say): it reads its variables
        raise ConfigError("tracing.sampler", "$OTEL_TRACES_SAMPLER names no sampler: one of "
                          + ", ".join(Sampler)) from None


def _sampler_ratio(config: TracingConfig, environ: Mapping[str, str]) -> float:
    """``tracing.sampler_arg``, else ``$OTEL_TRACES_SAMPLER_ARG`` when a ratio sampler reads it
    (the loader checks the key; the variable is checked here), else 1."""
    if config.sampler_arg is not None:
        return config.sampler_arg
    raw = environ.get("OTEL_TRACES_SAMPLER_ARG", "").strip()
    if not raw or _sampler_name(config, environ) not in _RATIO_SAMPLERS:
        return 1.0
    try:
        ratio = float(raw)
    except ValueError:
        ratio = -1.0
    if not 0 <= ratio <= 1:
        raise ConfigError("tracing.sampler_arg", f"$OTEL_TRACES_SAMPLER_ARG is {raw!r}: it must "
                          "be a number from 0 to 1 (the ratio of traces kept)")
    return ratio


def _positive(environ: Mapping[str, str], name: str, default: int) -> int:
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError("tracing", f"${name} is {raw!r}: it must be a whole number, 1 or more")
    return int(raw)


def _max_queue_size(config: TracingConfig, environ: Mapping[str, str]) -> int:
    if config.max_queue_size is not None:
        return config.max_queue_size
    return _positive(environ, "OTEL_BSP_MAX_QUEUE_SIZE", DEFAULT_MAX_QUEUE_SIZE)


def _value_length_limit(environ: Mapping[str, str]) -> int:
    """The span one over the general one, as the SDK reads them."""
    name = next((name for name in ("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT",
                                   "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT")
                 if environ.get(name, "").strip()), "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT")
    return _positive(environ, name, DEFAULT_VALUE_LENGTH_LIMIT)
