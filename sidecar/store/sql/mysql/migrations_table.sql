-- migrations_table: the record of applied migrations, made if missing.
CREATE TABLE IF NOT EXISTS webhook_sidecar_migrations (
    name       VARCHAR(255) NOT NULL PRIMARY KEY,
    applied_at DECIMAL(16,6) NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
