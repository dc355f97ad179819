INSERT INTO webhook_sidecar_migrations (name, applied_at)
VALUES (:name, (julianday('now') - 2440587.5) * 86400.0);
