INSERT INTO webhook_sidecar_migrations (name) VALUES (:name::text);
