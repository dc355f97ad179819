-- Operator repair: make a processing or failed row failed with its lease cleared.
UPDATE webhook_event
   SET state = 'failed',
       lease_owner = NULL,
       lease_until = NULL,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE provider = :provider AND event_id = :event_id
   AND state IN ('processing', 'failed')
RETURNING attempt;
