"""How the MySQL store tells a Galera node from one server, and the cluster's rules it checks
at start-up (``sidecar.store.mysql.galera``): pure checks of what the server answered."""

from __future__ import annotations

import pytest

from sidecar.core.errors import StoreError
from sidecar.store.mysql.galera import (
    SYNC_WAIT,
    Cluster,
    check_cluster,
    check_migrate,
    read_cluster,
)


def variables(**values: str) -> list[dict[str, object]]:
    return [{"Variable_name": k, "Value": v} for k, v in values.items()]


NODE = variables(wsrep_on="ON", wsrep_provider="/usr/lib/galera/libgalera_smm.so",
                 wsrep_sync_wait=str(SYNC_WAIT), wsrep_OSU_method="TOI", binlog_format="ROW",
                 wsrep_cluster_size="3")
TABLES = [{"table_name": "webhook_event", "engine": "InnoDB", "has_primary_key": 1}]


def test_one_server_is_no_galera_cluster() -> None:
    assert not read_cluster([]).galera  # MySQL 8: no wsrep variables at all
    assert not read_cluster(variables(wsrep_on="OFF", wsrep_provider="none")).galera
    # wsrep_on without a provider loaded replicates nothing
    assert not read_cluster(variables(wsrep_on="ON", wsrep_provider="none")).galera
    check_cluster(read_cluster([]), [{"table_name": "t", "engine": "MyISAM",
                                      "has_primary_key": 0}])  # not Galera's rules


def test_a_galera_node_is_read_with_its_cluster_size() -> None:
    cluster = read_cluster(NODE)
    assert cluster == Cluster(galera=True, sync_wait=1, osu_method="TOI", binlog_format="ROW",
                              size=3)
    assert str(cluster) == "Galera cluster of 3 nodes"
    check_cluster(cluster, TABLES)
    check_migrate(cluster)


@pytest.mark.parametrize(("changed", "tables", "says"), [
    ({"binlog_format": "MIXED"}, TABLES, "binlog_format=ROW"),
    ({"wsrep_sync_wait": "0"}, TABLES, "wsrep_sync_wait=0"),
    ({}, [{"table_name": "webhook_event", "engine": "MyISAM", "has_primary_key": 1}],
     "ENGINE=InnoDB"),
    ({}, [{"table_name": "webhook_event", "engine": "InnoDB", "has_primary_key": 0}],
     "no primary key"),
])
def test_a_node_that_breaks_the_clusters_rules_is_refused_saying_what_to_change(
        changed: dict[str, str], tables: list[dict[str, object]], says: str) -> None:
    node = read_cluster([*NODE, *variables(**changed)])
    with pytest.raises(StoreError, match=says):
        check_cluster(node, tables)


def test_migrate_refuses_ddl_that_would_change_one_node_only() -> None:
    with pytest.raises(StoreError, match="wsrep_OSU_method is RSU"):
        check_migrate(read_cluster([*NODE, *variables(wsrep_OSU_method="RSU")]))
