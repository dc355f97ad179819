"""The validated configuration: frozen values, parsed once at start-up. Secrets never appear in a
``repr``.

Each field declares the YAML key it is filled from — its kind, default and documentation —
with ``setting`` (see ``sidecar.config.declarations``): the loader reads the file by these
declarations, in the order written, and the JSON Schemas and the reference tables in
``docs/configuration.md`` are generated from them (``python -m sidecar.config.schema --write``).
The choices are ``StrEnum``s: they compare equal to their YAML text
(``provider.on_payload_mismatch == "reject"``)."""

from sidecar.config.model.choices import (
    BodyReplay,
    LogFormat,
    LogLevel,
    Mode,
    PayloadMismatch,
    ResultCommit,
    StoreKind,
    StoreOutage,
)
from sidecar.config.model.delivery import BreakerConfig, DeliveryConfig
from sidecar.config.model.destination import DestinationConfig, route_key
from sidecar.config.model.observability import (
    NotifyConfig,
    NotifyFormat,
    NotifyTarget,
    Sampler,
    SignatureFailuresConfig,
    TracingConfig,
)
from sidecar.config.model.provider import REQUIRED_WITHOUT_PRESET, ProviderConfig, QueueConfig
from sidecar.config.model.root import PROVIDER_KEY_PATTERN, Address, Config, MaintenanceConfig
from sidecar.config.model.store import PartitioningConfig, StoreConfig
from sidecar.config.model.upstream import SecretRef, UpstreamConfig

__all__ = [
    "PROVIDER_KEY_PATTERN", "REQUIRED_WITHOUT_PRESET", "Address", "BodyReplay", "BreakerConfig",
    "Config", "DeliveryConfig", "DestinationConfig", "LogFormat", "LogLevel",
    "MaintenanceConfig", "Mode",
    "NotifyConfig", "NotifyFormat", "NotifyTarget", "PartitioningConfig", "PayloadMismatch",
    "ProviderConfig", "QueueConfig", "ResultCommit", "Sampler", "SecretRef",
    "SignatureFailuresConfig", "StoreConfig", "StoreKind", "StoreOutage", "TracingConfig",
    "UpstreamConfig", "route_key",
]
