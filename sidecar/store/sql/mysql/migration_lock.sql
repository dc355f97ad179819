-- migration_lock: the migrate lease taken when nobody holds it (ER_DUP_ENTRY: somebody does,
-- or did: see migration_lock_again.sql).
INSERT INTO webhook_sidecar_lock (name, owner, expires_at)
VALUES ('migrate', :owner, ROUND({{now}} + :lease_seconds, 6));
