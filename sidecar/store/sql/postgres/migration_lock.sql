-- Serialises concurrent `migrate` runs; released at commit/rollback (pooler-safe).
SELECT pg_advisory_xact_lock(hashtextextended('webhook-sidecar:migrate', 0));
