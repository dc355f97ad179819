-- migration_record: a migration recorded as applied.
INSERT INTO webhook_sidecar_migrations (name, applied_at) VALUES (:name, {{now}});
