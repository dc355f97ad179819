-- migrations_exist: whether this database has the migrations table.
SELECT COUNT(*) > 0 AS present
  FROM information_schema.tables
 WHERE table_schema = DATABASE() AND table_name = 'webhook_sidecar_migrations';
