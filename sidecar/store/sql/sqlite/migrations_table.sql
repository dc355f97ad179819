CREATE TABLE IF NOT EXISTS webhook_sidecar_migrations (
    name       TEXT PRIMARY KEY,
    applied_at REAL NOT NULL
) STRICT;
