-- Operator repair: make a processing or failed row failed, lease cleared, so that the next
-- redelivery takes it over. A stale attempt's later `complete` is refused (state <> processing,
-- then attempt mismatch).
UPDATE webhook_event
   SET state = 'failed',
       lease_owner = NULL,
       lease_until = NULL,
       updated_at = clock_timestamp()
 WHERE provider = :provider::text AND event_id = :event_id::text
   AND state IN ('processing', 'failed')
RETURNING attempt;
