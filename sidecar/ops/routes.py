"""Which configured queue an operator names: a provider by its key, or one of its destinations
by ``<provider>.<destination>`` (``stripe.billing``) or by the provider's key and the
destination's name apart; anything else is a 404 that says what is configured."""

from __future__ import annotations

from sidecar.config.model import Config, ProviderConfig, route_key
from sidecar.config.model.destination import ROUTE_SEPARATOR
from sidecar.core.errors import OperationError


def find_route(config: Config, key: str, destination: str | None = None) -> ProviderConfig:
    """The provider ``key``, or its ``destination`` (given apart, or in the key)."""
    if destination is not None:
        if ROUTE_SEPARATOR in key:
            raise OperationError(404, f"{key!r} names a destination already: give the "
                                      "provider's key with a destination, or the destination's "
                                      "key alone")
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
    known = ", ".join(d.name for d in provider.destinations)
    raise OperationError(404, f"provider {name!r} has no destination {wanted!r} (its "
                              f"destinations: {known})")


def named_key(config: Config, key: str, destination: str | None) -> str:
    """The store key an operator names: ``key`` as given (a provider no longer configured
    still has rows to read), or with a ``destination``, that destination's key, which must be
    configured. An empty destination (a form's, a query string's) is not given."""
    if not destination:
        return key
    return find_route(config, key, destination).key


def split_key(key: str) -> tuple[str, str] | None:
    """A destination's key as (provider, destination) (``stripe.billing``); None for a
    provider's. Read from the key itself: a destination removed from the config still has
    rows."""
    provider, dot, destination = key.rpartition(ROUTE_SEPARATOR)
    return (provider, destination) if dot and provider and destination else None
