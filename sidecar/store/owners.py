"""The lease owner each claiming call writes: the process's owner id and a token of the call."""

from __future__ import annotations

import itertools
import secrets

# Call tokens: random per process, counted per call (no system call on the hot path).
_PROCESS_TOKEN = secrets.token_hex(4)
_calls = itertools.count(1)


def call_owner(owner: str) -> str:
    """The lease owner written by one ``claim``, ``take_over``, ``enqueue`` or ``take_queued``
    call: the process's owner id and a token of the call. An adapter that repeats a call whose
    connection failed finds the first run's rows by it (``sql/postgres/claim_landed.sql``,
    ``take_over_landed.sql``, ``enqueue_landed.sql``, ``take_queued_landed.sql``)."""
    return f"{owner}#{_PROCESS_TOKEN}.{next(_calls)}"
