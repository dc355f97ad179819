SELECT EXISTS (
    SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'webhook_sidecar_migrations'
) AS present;
