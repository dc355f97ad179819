"""A Galera cluster behind ``store.url``: how the store finds out (``wsrep_on``), what it pins
on each connection there, and the cluster's rules checked at start-up. Pure values and checks of
what the server answered; the statements live in ``sql/mysql/`` (``wsrep.sql``,
``galera_session.sql``, ``galera_tables.sql``, ``galera_primary_keys.sql``). Why:
docs/design.md, "Galera"."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from sidecar.core.errors import StoreError

# wsrep_sync_wait=1: a transaction's BEGIN (and every SELECT) first waits until this node has
# applied every commit the cluster certified before it, so a claim run again after losing to
# another node's commit finds that node's row, and a read sees what any node committed.
SYNC_WAIT: Final = 1


@dataclass(frozen=True)
class Cluster:
    """What ``wsrep.sql`` read: ``galera`` is False on a server without wsrep (or with it off)."""

    galera: bool
    sync_wait: int = 0
    osu_method: str = "TOI"
    binlog_format: str = "ROW"
    size: int = 0

    def __str__(self) -> str:
        return f"Galera cluster of {self.size} nodes" if self.galera else "one server"


def read_cluster(variables: Iterable[Mapping[str, object]]) -> Cluster:
    """The ``Cluster`` of ``wsrep.sql``'s rows (``Variable_name``, ``Value``)."""
    values = {str(r["Variable_name"]).lower(): str(r["Value"]) for r in variables}
    on = values.get("wsrep_on", "OFF").upper() == "ON"
    provider = values.get("wsrep_provider", "none").lower()
    if not on or provider in ("", "none"):
        return Cluster(galera=False)
    return Cluster(galera=True, sync_wait=int(values.get("wsrep_sync_wait", "0") or 0),
                   osu_method=values.get("wsrep_osu_method", "TOI").upper(),
                   binlog_format=values.get("binlog_format", "ROW").upper(),
                   size=int(values.get("wsrep_cluster_size", "0") or 0))


def check_cluster(cluster: Cluster, tables: Iterable[Mapping[str, object]]) -> None:
    """Raise ``StoreError`` saying what to change unless the store can run on this Galera node
    (read on a connection with the pinned settings): row-based binary log format, the causal
    reads pinned, and every table of the store InnoDB with a primary key (``tables``:
    ``galera_tables.sql``'s rows, each with ``has_primary_key``)."""
    if not cluster.galera:
        return
    if cluster.binlog_format != "ROW":
        raise StoreError(f"binlog_format is {cluster.binlog_format} on a Galera node: Galera "
                         "replicates rows only; set binlog_format=ROW on every node")
    if cluster.sync_wait & SYNC_WAIT != SYNC_WAIT:
        raise StoreError(f"the session kept wsrep_sync_wait={cluster.sync_wait} instead of the "
                         f"{SYNC_WAIT} the store sets: something between the store and the "
                         "node (a proxy, init_connect) changes session settings")
    for table in tables:
        name = table["table_name"]
        if str(table["engine"]).upper() != "INNODB":
            raise StoreError(f"table {name} uses {table['engine']}: Galera replicates InnoDB "
                             f"only; run ALTER TABLE {name} ENGINE=InnoDB")
        if not table["has_primary_key"]:
            raise StoreError(f"table {name} has no primary key, which Galera needs")


def check_migrate(cluster: Cluster) -> None:
    """Raise ``StoreError`` unless a migration's DDL reaches every node (``TOI``)."""
    if cluster.galera and cluster.osu_method != "TOI":
        raise StoreError(f"wsrep_OSU_method is {cluster.osu_method}: a migration would change "
                         "this node only; run migrate with wsrep_OSU_method=TOI")
