"""The loader's steps for ``store:``: a relative SQLite path, the pool's bounds, and the
PostgreSQL-only settings (``result_commit: no_wait``, ``partitioning``) refused elsewhere."""

from __future__ import annotations

from pathlib import Path

from sidecar.config.hints import fix
from sidecar.config.model import ResultCommit
from sidecar.config.reading import Load, Values, sibling
from sidecar.core.durations import format_duration
from sidecar.core.errors import ConfigError


def store_url(url: str, path: str, values: Values, load: Load) -> str:
    """A relative SQLite path is relative to the config file's folder."""
    if url.startswith("sqlite:///") and not Path(rel := url[len("sqlite:///"):]).is_absolute():
        return "sqlite:///" + str((load.base / rel).resolve())
    return url


def pool_max_size(size: int, path: str, values: Values, load: Load) -> int:
    minimum = values.known("pool_min_size")
    if minimum is not None and minimum > size:
        raise ConfigError(sibling(path, "pool_min_size"), f"must not exceed pool_max_size "
                          f"({minimum} > {size})" + fix(
                              ("lower", sibling(path, "pool_min_size"), "store.pool_min_size"),
                              ("raise", path, "store.pool_max_size")))
    return size


def result_commit(commit: ResultCommit, path: str, values: Values, load: Load
                   ) -> ResultCommit:
    """no_wait is a PostgreSQL session setting, sent as a startup parameter."""
    if commit is ResultCommit.WAIT:
        return commit
    url = values.known("url")
    if isinstance(url, str) and url.startswith("sqlite:"):
        raise ConfigError(path, "no_wait is PostgreSQL only (SQLite commits every write with "
                          "synchronous = FULL)" + fix(("change", path, "store.result_commit")))
    if values.known("session_settings") is False:
        raise ConfigError(path, "no_wait needs session_settings: true (it is sent as the "
                          "synchronous_commit startup parameter of the result writes' "
                          "connections, which pgbouncer refuses)" + fix(
                              ("change", path, "store.result_commit")))
    return commit


def partition_interval(interval: float | None, path: str, values: Values,
                        load: Load) -> float | None:
    """Partitions of whole seconds, a minute at least (a partition per second would make every
    keyed lookup probe thousands of indexes), on PostgreSQL only."""
    if interval is None:
        return None
    url = load.known("store.url")
    if url is not None and url.startswith("sqlite:"):
        raise ConfigError(path, "partitioning is for PostgreSQL; the embedded SQLite store is "
                          "not partitioned" + fix(("remove", path, "store.partitioning.interval")))
    if interval < 60 or interval != int(interval):
        raise ConfigError(path, f"must be whole seconds, 1m at least (not "
                          f"{format_duration(interval)})")
    return interval
