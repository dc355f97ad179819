-- Bookkeeping for numbered migrations; created by `migrate` under the migration lock.
CREATE TABLE IF NOT EXISTS webhook_sidecar_migrations (
    name       text        PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
