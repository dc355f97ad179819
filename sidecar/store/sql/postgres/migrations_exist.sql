SELECT to_regclass('webhook_sidecar_migrations') IS NOT NULL AS present;
