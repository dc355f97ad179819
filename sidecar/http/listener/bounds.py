"""What one listener allows its connections (:class:`Bounds`), and the connections it refused or
closed to make room, logged as one line at most every ``REFUSALS_LOGGED_EVERY`` seconds."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Final

from sidecar.config.model import Config
from sidecar.obs.logs import get_logger

log = get_logger("sidecar.listener")


@dataclass(frozen=True, slots=True)
class Bounds:
    """What one listener allows its connections; ``name`` is its key, named in its lines."""

    name: str
    header_read_timeout: float
    idle_timeout: float
    max_connections: int

    @classmethod
    def provider(cls, config: Config) -> Bounds:
        return cls("listen", config.header_read_timeout, config.idle_timeout,
                   config.max_connections)

    @classmethod
    def admin(cls, config: Config) -> Bounds:
        return cls("admin_listen", config.header_read_timeout, config.idle_timeout,
                   config.admin_max_connections)


# Seconds between two `connection_refused` (or `idle_connections_closed`) lines of a listener.
REFUSALS_LOGGED_EVERY: Final = 10.0


@dataclass(slots=True)
class ThrottledCount:
    """Connections a listener refused (or closed to make room), logged as one line at most
    every ``REFUSALS_LOGGED_EVERY`` seconds, with the count since the previous line."""

    event: str
    counted: str  # the field the count is logged as
    count: int = 0
    logged: float | None = None

    def add(self, bounds: Bounds, **fields: object) -> None:
        self.count += 1
        now = asyncio.get_running_loop().time()
        if self.logged is None or now - self.logged >= REFUSALS_LOGGED_EVERY:
            log.warning(self.event, listener=bounds.name, max_connections=bounds.max_connections,
                        **{self.counted: self.count}, **fields)
            self.count = 0
            self.logged = now
