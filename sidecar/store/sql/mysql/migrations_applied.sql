-- migrations_applied: names of the applied migrations.
SELECT name FROM webhook_sidecar_migrations ORDER BY name;
