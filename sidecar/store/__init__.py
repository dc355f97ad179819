"""Storage adapters implementing ``sidecar.core.ports.Store``.

- ``sidecar.store.postgres.PostgresStore`` (asyncpg): the production store, shared by any number
  of proxy replicas; its schema is applied by ``migrate_postgres`` (``webhook-sidecar migrate``),
  never implicitly.
- ``sidecar.store.sqlite.SQLiteStore`` (stdlib ``sqlite3``): the embedded default, correct for
  one host (several processes may share the file); it migrates itself when opened.

SQL lives in ``sql/<dialect>/*.sql`` (queries) and ``sql/<dialect>/migrations/NNNN_name.sql``
(numbered, forward-only migrations); Python passes parameters only.
"""
