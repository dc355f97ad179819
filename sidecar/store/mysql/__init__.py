"""MySQL 8 / MariaDB 10.6+ adapter (asyncmy, the ``[mysql]`` extra): a store shared by any
number of proxy replicas, like PostgreSQL.

Every connection is pinned to strict ``sql_mode``, UTC and READ COMMITTED, and asks for found
rows; start-up refuses a server older than supported, one whose binary log cannot record READ
COMMITTED writes, a session whose pinned settings do not hold, and a user without the
privileges needed (``migrate``: DDL too). Verbs that write and answer are short transactions
of a few statements (no ``RETURNING``); the claim is a plain ``INSERT`` whose duplicate-key
error means "exists". There is no LISTEN: queue workers find other replicas' work by polling
(``queue.poll_interval``). Semantics verb by verb: docs/design.md, "MySQL and MariaDB".

``store`` holds :class:`MySQLStore` and the migration runner, ``session`` the pinned settings,
the URL and the start-up checks.
"""

from sidecar.store.mysql.store import MySQLStore, migrate_mysql

__all__ = ["MySQLStore", "migrate_mysql"]
