"""SQLite adapter (stdlib ``sqlite3``): the embedded default store, correct on one host.

One connection, used from one dedicated worker thread (every call goes through a single-thread
executor), in WAL mode with ``synchronous=FULL`` so an acknowledged claim survives a crash.
Several processes on the same host may share the file: writes wait up to ``busy_timeout`` for
the lock, single statements are atomic, and the read-after-write sequences (``claim``, and
nonce binds run together) run inside ``BEGIN IMMEDIATE``. Not for a network filesystem, nor for
replicas on several hosts.
Claims, result writes and nonce binds that arrive while one of them is in flight are run
together when it returns, whatever their kinds, in one ``BEGIN IMMEDIATE`` transaction with one
commit (one WAL fsync) for all of them (:mod:`sidecar.store.coalesce` gathers them,
``transactions.together`` runs them), each answered as if it had run alone, each in a savepoint
of its own (one that fails is rolled back alone).

Queue mode writes the event row and its queue entry together; SQLite writes one table per
statement, so each of those verbs runs a few statements (``enqueue_*.sql``, ``take_queued_*.sql``,
``settle_queued_*.sql``, ``requeue_dead_*.sql``) inside one ``BEGIN IMMEDIATE`` transaction:
nothing changes between them, and they commit or roll back together. There are no
notifications: ``listen_queue`` waits until cancelled, and workers poll.

Times are REAL seconds since the Unix epoch from SQLite's clock (millisecond resolution).
The store applies its own migrations when opened.

``store`` holds :class:`SQLiteStore`, ``transactions`` the verbs of more than one statement (each
in one ``BEGIN IMMEDIATE``), and ``connection`` the file and its connection.
"""

from sidecar.store.sqlite.store import SQLiteStore

__all__ = ["SQLiteStore"]
