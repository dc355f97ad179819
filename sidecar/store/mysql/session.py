"""The connection settings the MySQL adapter pins, and the start-up checks of a server (its
version, the settings as read back, the binary log format, the user's privileges): pure values
and checks of what the server answered; the statements live in ``sql/mysql/``."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Final

from sidecar.config.mysql_url import Target, parse_url
from sidecar.core.errors import StoreError

__all__ = ["Target", "check_privileges", "check_server", "parse_url"]

DIALECT: Final = "mysql"  # the store's SQL files: sql/mysql/*.sql

# Pinned on every connection (set once when it is opened, read back at start-up):
# - strict mode, so a value that does not fit is an error, never a truncation or a warning;
#   no ANSI_QUOTES or PIPES_AS_CONCAT (the SQL files use MySQL's default meanings), nor
#   MariaDB's SIMULTANEOUS_ASSIGNMENT (take_tokens.sql is written for either order anyway);
# - UTC, so UNIX_TIMESTAMP(NOW(6)) is the epoch without a daylight-saving gap or fold;
# - READ COMMITTED (isolation.sql): every statement reads the latest commits and takes no
#   gap locks (docs/design.md, "MySQL and MariaDB"). Not read back: its variable is named
#   differently on MySQL 8 and MariaDB; the SET raises if it fails.
SQL_MODE: Final = ("STRICT_TRANS_TABLES,STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,"
                   "ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION")

MIN_MARIADB: Final = (10, 6)  # SKIP LOCKED, JSON_TABLE, enforced CHECK
MIN_MYSQL: Final = (8, 0, 16)  # enforced CHECK constraints (SKIP LOCKED and JSON_TABLE: 8.0.4)

# What `migrate` needs on the database (the proxy itself: SELECT, INSERT, UPDATE, DELETE).
MIGRATE_PRIVILEGES: Final = frozenset({"SELECT", "INSERT", "UPDATE", "DELETE", "CREATE",
                                       "ALTER", "INDEX", "REFERENCES", "DROP"})
RUN_PRIVILEGES: Final = frozenset({"SELECT", "INSERT", "UPDATE", "DELETE"})

_VERSION = re.compile(r"^(?:5\.5\.5-)?(\d+)\.(\d+)\.(\d+)")


def server_kind(version: str) -> tuple[str, tuple[int, ...]]:
    """``("MariaDB" | "MySQL", (major, minor, patch))`` of a ``VERSION()`` string."""
    match = _VERSION.match(version)
    numbers = tuple(int(n) for n in match.groups()) if match else (0, 0, 0)
    return ("MariaDB" if "mariadb" in version.lower() else "MySQL"), numbers


def check_server(server: Mapping[str, object]) -> None:
    """Raise ``StoreError`` saying what to change unless the server (``server.sql``'s record,
    read on a connection with the pinned settings) can run the store."""
    version = str(server["version"])
    kind, numbers = server_kind(version)
    least = MIN_MARIADB if kind == "MariaDB" else MIN_MYSQL
    if numbers < least:
        raise StoreError(f"{kind} {version} is older than this store supports: it needs "
                         f"{kind} {'.'.join(map(str, least))} or newer")
    mode = set(str(server["sql_mode"]).split(",")) - {""}
    if mode != set(SQL_MODE.split(",")):
        raise StoreError(f"the server kept sql_mode {server['sql_mode']!r} instead of the one "
                         f"the store sets ({SQL_MODE}): something between the store and the "
                         "server (a proxy, init_connect) changes session settings")
    if str(server["time_zone"]) != "+00:00":
        raise StoreError(f"the session time_zone is {server['time_zone']!r}, not +00:00: "
                         "something between the store and the server changes it")
    if int(str(server["log_bin"] or 0)) and str(server["binlog_format"]).upper() == "STATEMENT":
        raise StoreError("binlog_format is STATEMENT, which cannot log writes made at READ "
                         "COMMITTED: set binlog_format=ROW on the server (the default since "
                         "MySQL 5.7.7 and MariaDB 10.2.4)")


def check_privileges(held: Collection[str], needed: Collection[str], user: str,
                     database: str) -> None:
    """Raise ``StoreError`` naming the GRANT to run unless ``held`` covers ``needed``."""
    missing = sorted(set(needed) - {p.upper() for p in held})
    if missing:
        raise StoreError(f"user {user} lacks {', '.join(missing)} on database {database}; "
                         f"run GRANT {', '.join(missing)} ON `{database}`.* TO {user} "
                         "(privileges held only through a role must be granted directly)")
