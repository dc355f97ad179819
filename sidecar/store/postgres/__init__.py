"""PostgreSQL adapter (asyncpg): the production store, shared by any number of proxy replicas.
The only part of the proxy that imports asyncpg.

Every verb is one short autocommitted statement on a connection held only for that statement
(``claim`` and ``bind_nonce`` may need a second, plain read). Claims, result writes and nonce
binds that arrive while one of their kind is in flight are sent together when it returns, as one
statement over arrays with one commit (``claim_batch.sql``, ``complete_batch.sql``,
``bind_nonce_batch.sql``; :mod:`sidecar.store.coalesce`), each answered as if it had run alone.
Invariants are enforced by the database: the primary key arbitrates claims (on a partitioned
store, ``store.partitioning``, a uniqueness trigger: ``partitioning``), guarded
``UPDATE … RETURNING`` statements arbitrate takeovers and fence result writes by attempt, and
every time comes from the database clock (``clock_timestamp()``).

Every call has one deadline (``statement_timeout``) and ends in rows or a ``StoreError``, never
in a driver error. A connection that fails is closed, never reused, and the call is repeated
once on a connection that has just answered where that is safe (``again.AGAIN`` says which, and
how a repeated write recognises its own first run). A take-over or result write meeting an event
row another session holds gives up at once with ``RowLocked`` (``row_lock_wait.fragment.sql``).

Queue mode's writes (``enqueue``, ``take_queued``, ``settle_queued``, ``requeue_dead``) are
one statement each too, over the event row and its queue entry together; ``enqueue`` and
``requeue_dead`` NOTIFY the provider's workers in every process at commit, and
:meth:`PostgresStore.listen_queue` LISTENs for that on a connection of its own.

The schema is applied by :func:`migrate_postgres` (``webhook-sidecar migrate``);
:meth:`PostgresStore.connect` only checks it and refuses a database that is behind.

By concern:

- ``store``: :class:`PostgresStore`, the verbs' adapter: the insert race of ``claim`` and
  ``enqueue``, the writes sent together, the outage log;
- ``again``: what a call does when its connection fails (``AGAIN``), within the deadline;
- ``faults``: what the driver's errors mean (refused, or the connection lost);
- ``connections``: the pool, and each connection's fate after a call;
- ``listen``: queue mode's LISTEN connection;
- ``migrate``: :func:`migrate_postgres`;
- ``partitioning``: partitioned retention: the switch, the start-up check, the upkeep;
- ``outage``: an outage reported once, its end once.
"""

from sidecar.store.postgres.migrate import migrate_postgres
from sidecar.store.postgres.store import PostgresStore

__all__ = ["PostgresStore", "migrate_postgres"]
