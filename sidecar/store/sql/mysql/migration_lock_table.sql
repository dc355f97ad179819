-- migration_lock_table: the lease concurrent `migrate` runs take turns on, made if missing.
CREATE TABLE IF NOT EXISTS webhook_sidecar_lock (
    name       VARCHAR(64)   NOT NULL PRIMARY KEY,
    owner      VARCHAR(255)  NOT NULL,
    expires_at DECIMAL(16,6) NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
