"""The pool, and what each new connection is pinned to and checked for (``session.py``'s
settings; on a Galera node ``galera.py``'s too)."""

from __future__ import annotations

from typing import Any

import asyncmy
from asyncmy.constants.CLIENT import FOUND_ROWS
from asyncmy.cursors import DictCursor

from sidecar.core.errors import StoreError
from sidecar.store.mysql.galera import SYNC_WAIT, Cluster, check_cluster, read_cluster
from sidecar.store.mysql.session import SQL_MODE, Target, check_privileges, check_server
from sidecar.store.mysql.tx import Tx, describe
from sidecar.store.rows import Params


async def open_pool(target: Target, min_size: int, max_size: int, timeout: float) -> Any:
    try:
        return await asyncmy.create_pool(
            minsize=min_size, maxsize=max_size, **_connect_args(target, timeout))
    except (asyncmy.errors.Error, OSError, TimeoutError) as exc:
        raise StoreError(f"cannot connect to {target!r}: {describe(exc)}") from exc


def _connect_args(target: Target, timeout: float) -> dict[str, Any]:
    args: dict[str, Any] = {
        "host": target.host, "port": target.port, "user": target.user,
        "password": target.password, "db": target.database, "autocommit": True,
        "charset": "utf8mb4", "connect_timeout": timeout, "client_flag": FOUND_ROWS,
    }
    if target.unix_socket:
        args["unix_socket"] = target.unix_socket
    if target.ssl:
        args["ssl"] = _tls(target)
    return args


def _tls(target: Target) -> Any:
    """TLS that verifies the server's certificate and host name: against ``ssl_ca`` when the
    URL names one (a managed server's CA bundle), else the system's CAs."""
    import ssl

    try:
        return ssl.create_default_context(cafile=target.ssl_ca)
    except (OSError, ssl.SSLError) as exc:
        raise StoreError(f"store.url: ssl_ca={target.ssl_ca} cannot be used as a CA bundle: "
                         f"{exc}") from exc


async def pin(conn: Any, lock_timeout: float) -> None:
    """The session settings the SQL files are written for (``session.py``); on a Galera node
    causal reads too (``galera.py``), so a node that joins the cluster later is pinned alike."""
    async with conn.cursor() as cursor:
        tx = Tx(cursor)
        await tx.count("session", {"sql_mode": SQL_MODE,
                                   "lock_wait": max(1, round(lock_timeout))})
        await tx.count("isolation", {})
    async with conn.cursor(DictCursor) as cursor:
        tx = Tx(cursor)
        if read_cluster(await tx.rows("wsrep", {})).galera:
            await tx.count("galera_session", {"sync_wait": SYNC_WAIT})


async def check(tx: Tx, needed: frozenset[str], target: Target) -> Cluster:
    """Raise ``StoreError`` saying what to change unless the server, the session as pinned and
    the user's privileges can run the store; what the server is (one, or a Galera node)."""
    [server] = await tx.rows("server", {})
    check_server(server)
    held = [str(r["privilege_type"]) for r in await tx.rows("privileges", {})]
    check_privileges(held, needed, str(server["user_name"]), target.database)
    cluster = read_cluster([*await tx.rows("wsrep", {}), *await tx.rows("wsrep_size", {})])
    if cluster.galera:  # the tables first: a table made meanwhile is made with its key
        tables = await tx.rows("galera_tables", {})
        keyed = {r["table_name"] for r in await tx.rows("galera_primary_keys", {})}
        check_cluster(cluster, [{**t, "has_primary_key": t["table_name"] in keyed}
                                for t in tables])
    return cluster


def derived(name: str, params: Params) -> Params:
    """Values a statement needs that MySQL cannot compute where they stand (LIMIT takes a
    number, not an expression)."""
    if name in ("list_page", "list_page_queue"):
        return {**params, "limit_and_one": int(str(params["limit"])) + 1}
    return params
