INSERT INTO webhook_sidecar_migrations (name) VALUES ($1::text);
