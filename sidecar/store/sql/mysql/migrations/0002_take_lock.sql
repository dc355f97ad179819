-- webhook-sidecar schema 2 (MySQL 8 / MariaDB 10.6+): the row an ordered take writes first on
-- a Galera cluster (take_lock_row.sql): a provider with an order key runs its takes one after
-- another by writing its row here, a conflict at certification between nodes. (On one server
-- a named lock, GET_LOCK, does it and writes nothing; on a cluster it is local to one node.)

CREATE TABLE IF NOT EXISTS webhook_take_lock (
    provider VARBINARY(255) NOT NULL,
    takes    BIGINT         NOT NULL,
    PRIMARY KEY (provider)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
