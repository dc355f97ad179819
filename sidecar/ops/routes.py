"""Which configured queue an operator names: a provider by its key, or one of its destinations
by ``<provider>.<destination>`` (``stripe.billing``); anything else is a 404 that says what is
configured."""

from __future__ import annotations

from sidecar.config.model import Config, ProviderConfig, route_key
from sidecar.config.model.destination import ROUTE_SEPARATOR
from sidecar.core.errors import OperationError


def find_route(config: Config, key: str, destination: str | None = None) -> ProviderConfig:
    """The provider ``key``, or its ``destination`` (given apart, or in the key)."""
    if destination is not None:
        key = route_key(key, destination)
    route = config.route(key)
    if route is not None:
        return route
    name, dot, wanted = key.rpartition(ROUTE_SEPARATOR)
    provider = config.provider(name) if dot else None
    if provider is None:
        known = ", ".join(p.key for p in config.providers) or "none"
        raise OperationError(404, f"unknown provider {key!r} (configured: {known})")
    if not provider.routes:
        raise OperationError(404, f"provider {name!r} has no destinations, so no "
                                  f"{wanted!r}")
    known = ", ".join(r.destination or "" for r in provider.routes)
    raise OperationError(404, f"provider {name!r} has no destination {wanted!r} (its "
                              f"destinations: {known})")
