"""Lock waits over 100 ms, from a cluster's log: with ``log_lock_waits = on`` and
``deadlock_timeout = 100ms`` PostgreSQL logs every wait that passes 100 ms, the waiting
statement beside it. Pure functions of the log's text."""

from __future__ import annotations

import re
from dataclasses import dataclass

WAITING = re.compile(r"\[(\d+)\] LOG:  process \d+ still waiting for (\S+) on (.+?) after "
                     r"([\d.]+) ms")
ACQUIRED = re.compile(r"\[(\d+)\] LOG:  process \d+ acquired (\S+) on (.+?) after ([\d.]+) ms")
STATEMENT = re.compile(r"\[(\d+)\] STATEMENT:  (.*)")
PREFIXED = re.compile(r"^\d{4}-\d\d-\d\d ")  # a new log entry (log_line_prefix "%m [%p] ")

# What the store's retention runs: the batched delete (purge.sql, purge_nonces.sql) and, in a
# partitioned store, the partition maintenance (its functions, ATTACH / DETACH / DROP).
RETENTION_MARKS = ("DELETE FROM webhook_event", "DELETE FROM webhook_nonce",
                   "DELETE FROM webhook_attempt", "DETACH PARTITION", "ATTACH PARTITION",
                   "DROP TABLE", "PARTITION OF", "webhook_partition")


@dataclass(frozen=True, slots=True)
class LockWait:
    pid: int
    mode: str
    target: str
    waited_ms: float  # the longest the log reports: the final "acquired … after" if seen
    statement: str

    @property
    def by_retention(self) -> bool:
        """Retention (or partition upkeep) was the one waiting: it delays only itself (its
        partition steps give up after 100 ms and try again later)."""
        return any(mark in self.statement for mark in RETENTION_MARKS)

    @property
    def on_ddl(self) -> bool:
        """A delivery waited for a relation lock: only DDL — partition upkeep — takes one that
        conflicts with a delivery's."""
        return not self.by_retention and self.target.startswith("relation")


def lock_waits(log: str) -> list[LockWait]:
    """Every lock wait the log reports, once each (a wait logs "still waiting" and, when it
    ends, "acquired"; its STATEMENT line follows the first)."""
    found: list[LockWait] = []
    lines = log.splitlines()
    for n, line in enumerate(lines):
        match = WAITING.search(line)
        if match is None:
            continue
        pid, mode, target, waited = match.groups()
        statement = ""
        for m, later in enumerate(lines[n + 1:n + 6], n + 1):
            stated = STATEMENT.search(later)
            if stated is not None and stated.group(1) == pid:
                rest = []  # a statement's further lines carry no prefix
                for more in lines[m + 1:]:
                    if PREFIXED.match(more):
                        break
                    rest.append(more.strip())
                statement = " ".join([stated.group(2), *rest])
                break
        longest = float(waited)
        for later in lines[n + 1:]:
            acquired = ACQUIRED.search(later)
            if acquired is not None and acquired.group(1) == pid:
                longest = max(longest, float(acquired.group(4)))
                break
        found.append(LockWait(int(pid), mode, target, longest, statement))
    return found
