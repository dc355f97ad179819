"""The configuration's choices: ``StrEnum``s that compare equal to their YAML text
(``provider.on_payload_mismatch == "reject"``)."""

from __future__ import annotations

from enum import StrEnum


class LogLevel(StrEnum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class LogFormat(StrEnum):
    AUTO = "auto"  # JSON unless on a TTY
    JSON = "json"
    CONSOLE = "console"


class PayloadMismatch(StrEnum):
    """What a delivery gets when its event id is known but its body differs."""

    DUPLICATE = "duplicate"  # answered as the duplicate it claims to be
    REJECT = "reject"  # 422


class BodyReplay(StrEnum):
    """What a verified body gets when it was already seen under another event id."""

    REJECT = "reject"  # 401 replayed_body
    ALLOW = "allow"  # handled by its (new) event id like any delivery


class Mode(StrEnum):
    """How a provider's deliveries reach the app."""

    FORWARD = "forward"  # forwarded while the provider waits; the app's answer is relayed
    QUEUE = "queue"  # stored durably and answered 200 at once; delivery workers forward it


class StoreOutage(StrEnum):
    """What a verified delivery gets when the store cannot be reached at its claim."""

    REFUSE = "refuse"  # 503 with Retry-After: the provider retries later (dedupe kept)
    FORWARD = "forward"  # forwarded without a claim, marked unclaimed (dedupe given up)


class ResultCommit(StrEnum):
    """Whether a result write's commit waits for its WAL flush (PostgreSQL)."""

    WAIT = "wait"  # durable when answered, like every other write
    NO_WAIT = "no_wait"  # synchronous_commit = off: a server crash may lose it (a re-forward)


class StoreKind(StrEnum):
    SQLITE = "sqlite"  # one host only
    POSTGRESQL = "postgresql"  # any number of replicas
    MYSQL = "mysql"  # MySQL 8 or MariaDB 10.6+: any number of replicas
