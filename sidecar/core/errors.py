"""The one exception root. Driver errors are translated into these inside the adapters."""

from __future__ import annotations

from sidecar.core.events import Outcome


class SidecarError(Exception):
    """Root of every error this project raises on purpose."""


class ConfigError(SidecarError):
    """The configuration is invalid. ``path`` names the key, e.g. ``providers.stripe.lease``."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.message = message
        super().__init__(f"{path}: {message}" if path else message)


class VerificationError(SidecarError):
    """A delivery failed signature or timestamp verification (answered 401).

    ``reason`` is a short stable token for logs and metrics (``missing_signature``,
    ``bad_signature``, ``stale_timestamp``, ...). It never contains secret or signature bytes.
    """

    def __init__(self, reason: str, detail: str = "") -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}" if detail else reason)


class EventIdError(SidecarError):
    """A verified delivery carries no usable event id (answered 400)."""

    def __init__(self, reason: str, detail: str = "") -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}" if detail else reason)


class StoreError(SidecarError):
    """The store could not answer (unreachable, too slow, pool exhausted): answered 503."""


class RowLocked(StoreError):
    """The event's row is held by another database session (an operator's ``SELECT … FOR
    UPDATE``, a stuck transaction) and the statement gave up waiting for it. Nothing was
    written. A take-over meeting it answers like an attempt in flight (409 + ``Retry-After``);
    a result write tries again within its lease."""


class StoreClosed(StoreError):
    """The store was closed (shutdown): no call will succeed any more, so nothing retries."""


class SchemaError(StoreError):
    """The database schema is missing or older than this version needs (run ``migrate``)."""


class UpstreamError(SidecarError):
    """The upstream gave no HTTP answer. ``outcome`` is ``TIMEOUT``, ``CONNECT_ERROR`` or
    ``DISCONNECTED``; after ``TIMEOUT`` or ``DISCONNECTED`` the app may have processed it."""

    def __init__(self, outcome: Outcome, detail: str = "") -> None:
        self.outcome = outcome
        self.detail = detail
        super().__init__(f"{outcome}: {detail}" if detail else outcome)


class OperationError(SidecarError):
    """An operator request (``events`` CLI, admin API) that cannot be carried out: no such
    event, a state the verb refuses. ``status`` is its HTTP equivalent."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)
