"""The load, the proxies' configuration and the answer bound derived from it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sidecar.config.model import Config, Mode
from tests.support import base_config

DATABASE = "sidecar_chaos"
APPLICATION_NAME = "webhook-sidecar"  # what the proxy's pool sets (sidecar/store/postgres/)

# The answer bound, from the config. Before forwarding, a delivery makes at most
# CALLS_BEFORE_FORWARD store calls outside its in-flight wait (the claim, its re-read, a
# take-over), each bounded by acquire_timeout + statement_timeout + 1 s (the margin asyncpg's
# command_timeout adds, sidecar/runtime/wiring.py). Then the forward and the result write:
# together at
# most the lease (the write is retried only until just before the lease ends, which began at
# the claim), or upstream.timeout plus one store call, whichever is longer. Plus SLACK for
# scheduling on a shared machine.
CALLS_BEFORE_FORWARD = 3
CALLS_TO_ACCEPT = 2  # queue mode: the enqueue and, for a redelivery, the existing row's read
COMMAND_TIMEOUT_MARGIN = 1.0
SLACK = 1.0


@dataclass(frozen=True, slots=True)
class Settings:
    seconds: float = 20.0  # how long new events are sent
    rate: float = 10.0  # new events per second
    give_up: float = 30.0  # an event is redelivered until 2xx or this long after its first try
    duplicate_share: float = 0.1  # events whose first delivery goes to both replicas at once
    lock_hold: float = 3.0  # row-locks: > the proxies' lock_timeout (300ms); 3 s = lease - 1 s
    result_commit: str = "wait"  # store.result_commit of the replicas (no_wait: the opt-in)
    store: str = "postgres"  # the replicas' store: postgres | mariadb (bench.chaos.database)


DEFAULTS = Settings()


def proxy_config(upstream_url: str, dsn: str, queue: bool = False,
                 result_commit: str = "wait",
                 delivery: Mapping[str, Any] | None = None,
                 destinations: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Two replicas, one provider, short bounds so faults show within seconds. ``queue``: the
    provider in queue mode, retrying fast (a dead replica's events are taken again after the
    lease). ``result_commit``: the store's (no_wait: result writes without their flush).
    ``delivery``: the provider's ``delivery`` block (limits, breaker). ``destinations``: the
    provider fans out (queue mode) to these apps, each URL by its destination's name."""
    config = base_config(upstream_url, dsn)
    config["providers"] = {"stripe": config["providers"]["stripe"]}  # lease 4s, wait 1s
    if queue:
        config["providers"]["stripe"].update({
            "mode": "queue", "queue": {"first_retry": "200ms", "max_retry_delay": "1s",
                                       "poll_interval": "250ms"}})
    if delivery is not None:  # the provider's delivery limits (rate, concurrency)
        config["providers"]["stripe"]["delivery"] = dict(delivery)
    if destinations:
        config["providers"]["stripe"]["destinations"] = [
            {"name": name, "upstream": {"url": url}} for name, url in destinations.items()]
    config["upstream"] = {"url": upstream_url, "timeout": "2s", "connect_timeout": "1s"}
    config["store"] = {"url": dsn, "pool_max_size": 5, "acquire_timeout": "500ms",
                       "statement_timeout": "500ms", "lock_timeout": "300ms",
                       "result_commit": result_commit}
    config["shutdown_timeout"] = "5s"
    config["body_read_timeout"] = "5s"
    return config


def answer_bound(config: Config) -> float:
    store = config.store
    call = store.acquire_timeout + store.statement_timeout + COMMAND_TIMEOUT_MARGIN
    if all(p.mode is Mode.QUEUE for p in config.providers):  # answered once stored
        return CALLS_TO_ACCEPT * call + SLACK
    wait = max(p.inflight_wait for p in config.providers)
    lease = max(p.lease for p in config.providers)
    return (wait + CALLS_BEFORE_FORWARD * call + max(config.upstream.timeout + call, lease)
            + SLACK)
