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
# From source until a release is on PyPI; the PyPI form is printed too, marked as such.
INSTALL_HINT: Final = ("install the otel extra: pip install '.[otel]' in a source checkout "
                       "(pip install 'webhook-sidecar[otel]' once released; not yet)")


def tracing_wanted(config: TracingConfig, environ: Mapping[str, str] = os.environ) -> bool:
    """``tracing.enabled`` if set; else whether an OTLP endpoint is configured, here or in the
    environment, and the SDK is not disabled (``OTEL_SDK_DISABLED=true``)."""
    if config.enabled is not None:
        return config.enabled
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return config.endpoint is not None or any(environ.get(name) for name in ENDPOINT_VARIABLES)


def why_wanted(config: TracingConfig, environ: Mapping[str, str]) -> str:
    if config.enabled:
        return "tracing.enabled is true"
    if config.endpoint is not None:
        return "tracing.endpoint is set"
    return next(f"${name} is set" for name in ENDPOINT_VARIABLES if environ.get(name))


def build_tracer(config: TracingConfig, metrics: Metrics, *, db_system: str,
                 environ: Mapping[str, str] = os.environ,
                 exporter: SpanExporter | None = None) -> OtelTracer | None:
    """The OpenTelemetry tracer, exporting over OTLP/HTTP (or to ``exporter``), or None when
    tracing is off. Raises ``ConfigError`` when tracing is asked for and the ``otel`` extra is
    not installed."""
    if exporter is None and not tracing_wanted(config, environ):
        return None
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider

        from sidecar.obs.otel import SCOPE, OtelTracer, RecordExporter, SdkExport, SpanQueue
        if exporter is None:
            from sidecar.obs import otlp
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
        sends = otlp.from_environment(
            otlp.Encoder(resource.attributes, resource.schema_url, SCOPE), config.endpoint,
            dict(config.headers), environ)
    else:
        sends = SdkExport(exporter, provider)
    queue = SpanQueue(sends, max_queue_size=config.max_queue_size, dropped=dropped)
    provider.add_span_processor(queue)  # the provider's force_flush and shutdown reach it
    return OtelTracer(provider, queue, db_system)


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
    try:
        name = config.sampler or Sampler(environ.get("OTEL_TRACES_SAMPLER",
                                                     Sampler.PARENTBASED_ALWAYS_ON))
    except ValueError:
        raise ConfigError("tracing.sampler", "$OTEL_TRACES_SAMPLER names no sampler: one of "
                          + ", ".join(Sampler)) from None
    ratio = config.sampler_arg
    if ratio is None:
        ratio = float(environ.get("OTEL_TRACES_SAMPLER_ARG", "1"))
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
