"""Result writes that commit without waiting for their WAL flush (``store.result_commit:
no_wait``, an opt-in; the default waits like every other write).

A commit with ``synchronous_commit = off`` is answered as soon as its WAL is in the server's
memory; the server writes it to disk within three times ``wal_writer_delay`` (600 ms by
default). If the server crashes (or its host loses power) in between, the transaction is lost
whole, as if it had never run: the database stays consistent, the write simply did not happen.
Nothing else changes: the write is visible to every other session at once, and a later
synchronous commit flushes it along with its own WAL.

So only writes whose loss the proxy already survives go this way: the calls in
``RESULT_WRITES``, each with why a lost one is safe. They run on a pool of their own whose
sessions have ``synchronous_commit = off`` from their startup parameters (no statement and no
round trip per call); the claims, take-overs, enqueues and takes stay on the store's pool and
wait for their flush (a lost claim could let two deliveries forward one event).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import asyncpg

from sidecar.store.postgres.connections import open_pool

RESULT_WRITES: Final[Mapping[str, str]] = {
    # The app's answer recorded on the row, fenced by attempt (complete.sql; complete_batch.sql
    # for concurrent ones). Lost, the row is `processing` under the lease of an attempt the app
    # has answered: the same state as a proxy that crashed before writing it (the documented
    # at-least-once window). A redelivery within the lease waits or gets 409; one after it is
    # forwarded again, attempt + 1. The provider was told what the app answered, which was true,
    # so it seldom redelivers: the row then stays `processing` (webhook_events_stuck) until
    # retention deletes it. The app has the event; only the proxy's record of it is lost.
    "complete": "the row stays processing; a redelivery after the lease forwards it again",
    # Queue mode's fenced settle of a take (settle_queued.sql). Lost, the entry is `processing`
    # under the take's lease, as after a worker that crashed mid-try: when the lease ends the
    # next take supersedes it (tries + 1) and forwards it again; a lost backoff or dead letter
    # is the same try repeated. The provider had its 200 when the event was stored.
    "settle_queued": "the entry stays processing; the next take after the lease forwards again",
}


async def open_result_pool(dsn: str, *, connect_timeout: float,
                           server_settings: Mapping[str, str], **options: int | float,
                           ) -> asyncpg.Pool:
    """The result writes' pool: the store's startup parameters plus ``synchronous_commit =
    off``, so each of its commits is answered before its WAL is flushed."""
    return await open_pool(dsn, connect_timeout=connect_timeout,
                           server_settings={**server_settings, "synchronous_commit": "off"},
                           **options)
