"""MySQL 8 / MariaDB 10.6+ adapter (asyncmy, the ``[mysql]`` extra): a store shared by any
number of proxy replicas, like PostgreSQL; on one server or on the nodes of a MariaDB Galera
cluster (multi-primary: replicas may connect to different nodes).

Every connection is pinned to strict ``sql_mode``, UTC and READ COMMITTED (on a Galera node,
causal reads too), and asks for found rows; start-up refuses a server older than supported, one
whose binary log cannot record READ COMMITTED writes, a session whose pinned settings do not
hold, a Galera node that breaks the cluster's rules, and a user without the privileges needed
(``migrate``: DDL too). Verbs that write and answer are short transactions of a few statements
(no ``RETURNING``); the claim is a plain ``INSERT`` whose duplicate-key error means "exists".
A transaction rolled back as a deadlock's victim, or (Galera) because another node's commit of
the same key certified first, runs again. There is no LISTEN: queue workers find other
replicas' work by polling (``queue.poll_interval``). Semantics verb by verb: docs/design.md,
"MySQL and MariaDB" and its "Galera".

By concern:

- ``store``: :class:`MySQLStore`, the pool and how each call runs (deadline, runs again);
- ``event_writes``, ``provider_writes``, ``queue_writes``: the verbs of more than one statement;
- ``tx``: one verb's statements on its connection, and what the server's error codes mean;
- ``connections``: the pool, what each connection is pinned to, the start-up checks;
- ``session``: the pinned settings, the URL and the server checks; ``galera``: a Galera node's;
- ``migrate``: :func:`migrate_mysql`, under the migrate lease;
- ``outage``: an outage reported once, its end once.
"""

from sidecar.store.mysql.migrate import migrate_mysql
from sidecar.store.mysql.store import MySQLStore

__all__ = ["MySQLStore", "migrate_mysql"]
