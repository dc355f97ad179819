"""Where event rows live (``store:``), and PostgreSQL's partitioned retention."""

from __future__ import annotations

from urllib.parse import urlsplit

from sidecar.config.declarations import block, nested, setting
from sidecar.config.kinds import (
    Boolean,
    Choice,
    Duration,
    Integer,
)
from sidecar.config.model.choices import ResultCommit, StoreKind
from sidecar.config.network_kinds import StoreURL


@block("PostgreSQL: the event, attempt and nonce tables range-partitioned by time, so that "
       "retention drops whole partitions instead of deleting rows one by one (see "
       "docs/operations.md, Partitioned retention). Set before `webhook-sidecar migrate` on a new "
       "database; an existing one is moved with `webhook-sidecar store partition`.",
       nullable=True)
class PartitioningConfig:
    interval: float | None = setting(Duration(positive=True), "The span of one partition, e.g. "
                                     "1d (at least 1m). Empty: unpartitioned, the default; the "
                                     "database must match (the proxy refuses to start and "
                                     "names the command that fixes it).", nullable=True)
    ahead: int = setting(Integer(1), "Partitions kept ready past the current one, created by "
                         "maintenance and at start-up (an insert past the last one lands in "
                         "the DEFAULT partition, counted and logged). Each is made in a short "
                         "transaction of its own whose lock wait gives up after 20 ms (tried "
                         "five times, then by the next run).", yaml_default=3)


@block("Where event rows live.", nullable=True)
class StoreConfig:
    url: str = setting(StoreURL(), "sqlite:///PATH (one host only; a relative PATH is relative to "
                       "the config file's folder), postgresql://… or mysql://… / mariadb://… "
                       "(MySQL 8, MariaDB 10.6+; the [mysql] extra): any number of replicas.",
                       yaml_default="sqlite:///./webhook-sidecar.db",
                       repr=False)  # may carry a password
    pool_min_size: int = setting(Integer(0), "PostgreSQL pool: connections kept open.",
                                 yaml_default=1)
    pool_max_size: int = setting(Integer(1), "PostgreSQL pool: at most this many connections.",
                                 yaml_default=10)
    acquire_timeout: float = setting(Duration(), "PostgreSQL: longest wait for a pooled "
                                     "connection, within statement_timeout (503 past it).",
                                     yaml_default="2s")
    statement_timeout: float = setting(Duration(), "PostgreSQL: deadline of each store call, "
                                       "from its wait for a connection to its answer, lock "
                                       "waits and one repeat on a new connection included; "
                                       "past it the call is cancelled (503). Also the "
                                       "server's statement_timeout. 0: none.",
                                       yaml_default="5s")
    lock_timeout: float = setting(Duration(), "PostgreSQL's lock_timeout: the longest wait for "
                                  "each lock a statement needs (a row queued behind another "
                                  "waiter costs two; statement_timeout bounds the call). A "
                                  "takeover or result write gives up on an event row another "
                                  "session holds after 100ms (or this, if shorter).",
                                  yaml_default="2s")
    statement_cache_size: int = setting(Integer(0), "Prepared statements cached per connection; "
                                        "0 behind pgbouncer in transaction mode.",
                                        yaml_default=100)
    notify: bool = setting(Boolean(), "PostgreSQL, queue mode: wake the delivery workers of "
                           "other replicas with LISTEN/NOTIFY (one dedicated connection per "
                           "process). Set false behind pgbouncer in transaction mode, which "
                           "cannot hold a LISTEN: workers then find new work by polling every "
                           "queue.poll_interval.", yaml_default=True)
    session_settings: bool = setting(Boolean(), "Send statement_timeout, lock_timeout and "
                                     "idle_in_transaction_session_timeout as connection startup "
                                     "parameters. Set false behind pgbouncer (it refuses them; "
                                     "set them with ALTER ROLE instead).", yaml_default=True)
    result_commit: ResultCommit = setting(
        Choice(ResultCommit),
        "PostgreSQL: wait: the app's answer is recorded durably before the provider gets it. "
        "no_wait (an opt-in: one WAL flush less per delivery): result writes, and queue mode's "
        "settles, commit without waiting for their WAL flush (synchronous_commit = off, on a "
        "pool of their own of up to pool_max_size connections); if the database server crashes "
        "within ~0.6 s of one, it is lost: the row stays processing (stuck; the app has the "
        "event) and a redelivery after the lease is forwarded again. Claims always wait. Not "
        "available on SQLite, nor with session_settings: false.",
        yaml_default="wait")
    partitioning: PartitioningConfig = nested(PartitioningConfig)

    @property
    def kind(self) -> StoreKind:
        if self.url.startswith("sqlite:"):
            return StoreKind.SQLITE
        if self.url.lower().startswith(("mysql:", "mariadb:")):
            return StoreKind.MYSQL
        return StoreKind.POSTGRESQL

    @property
    def sqlite_path(self) -> str:
        """``sqlite:///relative.db`` → ``relative.db``; ``sqlite:////abs/x.db`` → ``/abs/x.db``."""
        return self.url[len("sqlite:///") :]

    @property
    def redacted_url(self) -> str:
        parts = urlsplit(self.url)
        if parts.password:
            netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
            return parts._replace(netloc=netloc).geturl()
        return self.url

    def __repr__(self) -> str:
        return f"StoreConfig(url={self.redacted_url!r}, pool_max_size={self.pool_max_size})"
