SELECT name FROM webhook_sidecar_migrations ORDER BY name;
