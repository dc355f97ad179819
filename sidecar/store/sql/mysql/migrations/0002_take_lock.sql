-- webhook-sidecar schema 2 (MySQL 8 / MariaDB 10.6+): the row an ordered take writes first.
-- Each provider with an order key runs its takes one after another by writing its row here
-- (take_lock.sql): a row lock on one server, a certification conflict between Galera nodes
-- (a named lock, GET_LOCK, is local to one node of a cluster).

CREATE TABLE IF NOT EXISTS webhook_take_lock (
    provider VARBINARY(255) NOT NULL,
    takes    BIGINT         NOT NULL,
    PRIMARY KEY (provider)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
