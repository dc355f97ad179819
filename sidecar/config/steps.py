"""The loader's steps: what a key's declaration cannot say. Comparisons with keys read before,
values read with the environment or the file system, the core's parsers of the provider blocks
(signature, event id, handshake). Each is filed in ``STEPS`` under the key path it follows and
runs right after that key is read, with the value its kind read; it returns the model's value,
or raises ``ConfigError`` (reported) or ``Unusable`` (skipped).
"""

from __future__ import annotations

from typing import Any, Final

from sidecar.config.declarations import block_of
from sidecar.config.destination_steps import (
    DESTINATION_RULE,
    beside_destinations,
    destination_filter,
    destination_upstream,
    read_destinations,
)
from sidecar.config.hints import fix
from sidecar.config.model import (
    DeliveryConfig,
    Mode,
    StoreOutage,
    UpstreamConfig,
)
from sidecar.config.notify_steps import TARGET_RULE, read_targets, target_secret
from sidecar.config.providers import read_providers
from sidecar.config.reading import FAILED, Load, Step, Values, sibling
from sidecar.config.secret_sources import provider_secrets, signing_secrets
from sidecar.config.store_steps import (
    partition_interval,
    pool_max_size,
    result_commit,
    store_url,
)
from sidecar.core.durations import format_duration
from sidecar.core.errors import ConfigError
from sidecar.core.eventid import parse_event_id_spec
from sidecar.core.filter_config import parse_event_type_spec, parse_filter_spec
from sidecar.core.filtering import FilterSpec
from sidecar.core.handshake import parse_handshake_spec
from sidecar.core.jsonpath import parse_json_path
from sidecar.core.signing import SignatureSpec, parse_signature_spec


def _admin_listen(admin: Any, path: str, values: Values, load: Load) -> Any:
    if admin == values.known("listen") and admin.port != 0:
        raise ConfigError(path, "must differ from listen (admin routes are never served to "
                          "providers)" + fix(("change", "admin_listen", "admin_listen"),
                                             ("change", "listen", "listen")))
    return admin


def _signature(raw: object, path: str, values: Values, load: Load) -> SignatureSpec:
    return parse_signature_spec(raw, path)


def _event_id(raw: object, path: str, values: Values, load: Load) -> Any:
    return parse_event_id_spec(raw, path)


def _provider_upstream(upstream: UpstreamConfig, path: str, values: Values,
                       load: Load) -> UpstreamConfig:
    if values.known("destinations"):
        if any(load.known(f"{path}.{name}") is not None for name in _UPSTREAM_KEYS):
            raise beside_destinations("upstream", path)
        return upstream  # its own queue only fans out: no app to reach
    if upstream.url is None and values.get("destinations") is not FAILED:
        raise ConfigError(f"{path}.url", "is required: this provider has no upstream (neither "
                          "its own upstream.url nor a top-level upstream.url); set one of them")
    return upstream


_UPSTREAM_KEYS: Final = tuple(block_of(UpstreamConfig).keys)


def upstream_timeout(path: str, values: Values, load: Load) -> tuple[float | None, str, str]:
    """The timeout of the upstream of the provider whose key ``path`` is, the key path that sets
    it (the provider's own upstream.timeout, or the top level's) and that key's rule; ``None``
    if it could not be read."""
    own = f"{path.rpartition('.')[0]}.upstream.timeout"
    upstream = values.known("upstream")
    timeout = upstream.timeout if isinstance(upstream, UpstreamConfig) else None
    if load.known(own) is not None:
        return timeout, own, "providers.<key>.upstream.timeout"
    return timeout, "upstream.timeout", "upstream.timeout"


def _lease(lease: float, path: str, values: Values, load: Load) -> float:
    timeout, key, rule = upstream_timeout(path, values, load)
    if timeout is not None and lease <= timeout:
        raise ConfigError(path, f"must exceed {key} ({format_duration(timeout)}; "
                          f"the lease is {format_duration(lease)}), or a slow but live first "
                          "attempt would be taken over" + fix(
                              ("raise", path, "providers.<key>.lease"),
                              ("lower", key, rule),
                              preset=values.get("preset")))
    for i, destination in enumerate(values.known("destinations") or ()):
        if lease <= destination.upstream.timeout:
            own = f"{sibling(path, 'destinations')}[{i}].upstream.timeout"
            raise ConfigError(path, f"must exceed {own} "
                              f"({format_duration(destination.upstream.timeout)}; the lease "
                              f"is {format_duration(lease)}), or a slow but live attempt "
                              "would be taken over")
    return lease


def _inflight_wait(wait: float, path: str, values: Values, load: Load) -> float:
    lease, preset = values.known("lease"), values.get("preset")
    lease_path = sibling(path, "lease")
    if lease is None:
        return wait
    if wait > lease:
        raise ConfigError(path, f"must not exceed the lease ({format_duration(wait)} > "
                          f"{format_duration(lease)})" + fix(
                              ("lower", path, "providers.<key>.inflight_wait"),
                              ("raise", lease_path, "providers.<key>.lease"), preset=preset))
    (timeout, key, rule), event_id = (upstream_timeout(path, values, load),
                                      values.known("event_id"))
    if timeout is not None and event_id is not None and event_id.is_batch and (
            lease <= timeout + wait):
        raise ConfigError(lease_path, f"must exceed {key} + inflight_wait "
                          f"({format_duration(timeout)} + {format_duration(wait)} = "
                          f"{format_duration(timeout + wait)}; the lease is "
                          f"{format_duration(lease)}) for a batch provider: an item's lease "
                          "runs while the delivery waits for its other items" + fix(
                              ("raise", lease_path, "providers.<key>.lease"),
                              ("lower", path, "providers.<key>.inflight_wait"),
                              ("lower", key, rule), preset=preset))
    return wait


def _retention(retention: float, path: str, values: Values, load: Load) -> float:
    lease = values.known("lease")
    if lease is not None and retention <= lease:
        raise ConfigError(path, f"must exceed the lease ({format_duration(retention)} ≤ "
                          f"{format_duration(lease)})" + fix(
                              ("raise", path, "providers.<key>.retention"),
                              ("lower", sibling(path, "lease"), "providers.<key>.lease"),
                              preset=values.get("preset")))
    return retention


def _handshake(raw: object, path: str, values: Values, load: Load) -> Any:
    return parse_handshake_spec(raw, path)


def _mode(mode: Mode, path: str, values: Values, load: Load) -> Mode:
    if mode is Mode.FORWARD and values.known("destinations"):
        raise ConfigError(sibling(path, "destinations"), "applies to queue mode: each "
                          "destination is reached by delivery workers of its own, after the "
                          "provider is answered; set mode: queue" + fix(
                              ("change", path, "providers.<key>.mode")))
    event_id = values.known("event_id")
    if mode is Mode.QUEUE and event_id is not None and event_id.is_batch:
        raise ConfigError(path, "queue is not available for a batch provider (event_id.batch): "
                          "its items share one delivery; use forward")
    return mode


def _order_key(raw: object, path: str, values: Values, load: Load) -> Any:
    return parse_json_path(raw, path)


def _max_retry_delay(delay: float, path: str, values: Values, load: Load) -> float:
    first = values.known("first_retry")
    if first is not None and delay < first:
        raise ConfigError(path, f"must not be shorter than first_retry "
                          f"({format_duration(delay)} < {format_duration(first)})")
    return delay


def _delivery(delivery: DeliveryConfig, path: str, values: Values, load: Load
              ) -> DeliveryConfig:
    """The limit keys that cannot apply: a burst without a rate, a concurrency in forward mode
    (a provider waiting for its answer is never held back: it gets 429 from the rate). A
    provider with destinations has none of its own: each destination has its limits."""
    if values.known("destinations") and (delivery.rate is not None or delivery.concurrency
                                         is not None or delivery.breaker.failures is not None):
        raise beside_destinations("delivery", path)
    if delivery.burst is not None and delivery.rate is None:
        raise ConfigError(f"{path}.burst", "applies to delivery.rate, which is not set" + fix(
            ("set", f"{path}.rate", "providers.<key>.delivery.rate")))
    if delivery.concurrency is not None and values.known("mode") is Mode.FORWARD:
        raise ConfigError(f"{path}.concurrency", "applies to queue mode (mode: queue); in "
                          "forward mode the provider waits for each answer, so limit it with "
                          "delivery.rate (answered 429 over it)" + fix(
                              ("change", sibling(path, "mode"), "providers.<key>.mode")))
    return delivery


def _replay_nonce(raw: object, path: str, values: Values, load: Load) -> Any:
    nonce = parse_event_id_spec(raw, path)
    if nonce.is_batch:
        raise ConfigError(path, "must be one value ({header: …} or {json: …})")
    return nonce


def _event_type(raw: object, path: str, values: Values, load: Load) -> Any:
    return parse_event_type_spec(raw, path)


def _filter(raw: object, path: str, values: Values, load: Load) -> FilterSpec:
    """Type rules need to know where the event type is (the preset's, or the provider's own
    ``event_type``)."""
    spec = parse_filter_spec(raw, path)
    if spec.uses_types and values.get("event_type") is None:
        preset = values.get("preset")
        whose = (f"preset {preset} declares no event type" if isinstance(preset, str)
                 else "this provider declares no event type")
        raise ConfigError(f"{path}.types", f"{whose}: declare where it is with "
                          f"{sibling(path, 'event_type')} ({{header: Name}} or {{json: "
                          '"$.type"}), or filter with when conditions only')
    return spec


def _store_outage(outage: StoreOutage, path: str, values: Values, load: Load) -> StoreOutage:
    if outage is StoreOutage.FORWARD and values.known("mode") is Mode.QUEUE:
        raise ConfigError(path, "forward is for forward mode: queue mode answers only once the "
                          "event is stored, so without the store it has nothing to accept "
                          "with; use refuse (the provider retries)")
    return outage


STEPS: Final[dict[str, Step]] = {
    "admin_listen": _admin_listen,
    "upstream.signing_secrets": signing_secrets,
    "store.url": store_url,
    "store.pool_max_size": pool_max_size,
    "store.result_commit": result_commit,
    "store.partitioning.interval": partition_interval,
    "notify.targets": read_targets,
    f"{TARGET_RULE}.secret": target_secret,
    "providers": read_providers,
    "providers.<key>.signature": _signature,
    "providers.<key>.event_id": _event_id,
    "providers.<key>.secrets": provider_secrets,
    "providers.<key>.upstream": _provider_upstream,
    "providers.<key>.upstream.signing_secrets": signing_secrets,
    "providers.<key>.lease": _lease,
    "providers.<key>.inflight_wait": _inflight_wait,
    "providers.<key>.retention": _retention,
    "providers.<key>.handshake": _handshake,
    "providers.<key>.replay_nonce": _replay_nonce,
    "providers.<key>.mode": _mode,
    "providers.<key>.event_type": _event_type,
    "providers.<key>.filter": _filter,
    "providers.<key>.store_outage": _store_outage,
    "providers.<key>.queue.order_key": _order_key,
    "providers.<key>.delivery": _delivery,
    "providers.<key>.queue.max_retry_delay": _max_retry_delay,
    "providers.<key>.destinations": read_destinations,
    f"{DESTINATION_RULE}.upstream": destination_upstream,
    f"{DESTINATION_RULE}.upstream.signing_secrets": signing_secrets,
    f"{DESTINATION_RULE}.delivery": _delivery,
    f"{DESTINATION_RULE}.filter": destination_filter,
}

# Keys whose step interpolates their values itself: the provider blocks (each read by
# ``read_providers``), and the secrets, item by item (so an empty one can name its variable).
OWN_INTERPOLATION: Final = frozenset({"providers", "upstream.signing_secrets",
                                      "providers.<key>.secrets",
                                      "providers.<key>.upstream.signing_secrets",
                                      "notify.targets", f"{TARGET_RULE}.secret",
                                      "providers.<key>.destinations",
                                      f"{DESTINATION_RULE}.upstream.signing_secrets"})
