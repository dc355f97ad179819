"""Storage implementing ``sidecar.core.ports.Store``.

- ``sidecar.store.postgres.PostgresStore`` (asyncpg): the production store, shared by any number
  of proxy replicas; its schema is applied by ``migrate_postgres`` (``webhook-sidecar migrate``),
  never implicitly.
- ``sidecar.store.sqlite.SQLiteStore`` (stdlib ``sqlite3``): the embedded default, correct for
  one host (several processes may share the file); it migrates itself when opened.
- ``sidecar.store.memory.MemoryStore``: a dict in one process, for tests (with a clock you
  can move); it answers like the other two, by the same contract suite.

The two SQL adapters share everything but their connections, their claim race and queue mode's
writes to two tables at once (one statement in PostgreSQL, one transaction of a few in SQLite):
``verbs.SQLStore`` holds the verbs (one mapping of named parameters per verb), ``rows`` the
decoding of records, ``migrations`` the one migration runner, and ``sqlfiles`` the loading of
the SQL. SQL lives in ``sql/<dialect>/*.sql`` (queries, with named ``:parameters``; shared
column lists in ``*.fragment.sql``, or once in ``sql/shared/`` when both dialects spell them
alike) and ``sql/<dialect>/migrations/NNNN_name.sql`` (numbered, forward-only migrations);
Python passes parameters only. A store reports what it sees (an outage, a lost LISTEN) to an
``observer.StoreObserver`` and logs nothing itself.
"""
