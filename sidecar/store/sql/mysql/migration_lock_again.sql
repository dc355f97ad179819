-- migration_lock_again: the migrate lease renewed by its owner, or taken over once it ended
-- (its holder died). 1 row: held; 0: another run holds it.
UPDATE webhook_sidecar_lock
   SET owner = :owner, expires_at = ROUND({{now}} + :lease_seconds, 6)
 WHERE name = 'migrate' AND (owner = :owner OR expires_at < {{now}});
