-- Operator repair: make a failed row, or a processing row whose lease has expired, failed with
-- its lease cleared. A processing row with a live lease only with :force. One statement: SQLite
-- takes the write lock before reading, so the lease is checked against the row as it is when
-- the update runs (a lease ending exactly now counts as expired, as in take_over.sql).
-- No row: no such event, a done row, a live lease without :force, or a queued event's row
-- (one with a queue entry: queue mode retries, dead-letters and re-drives it).
UPDATE webhook_event
   SET state = 'failed',
       lease_owner = NULL,
       lease_until = NULL,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE provider = :provider AND event_id = :event_id
   AND state IN ('processing', 'failed')
   AND (state = 'failed' OR :force
        OR lease_until IS NULL OR lease_until <= (julianday('now') - 2440587.5) * 86400.0)
   AND NOT EXISTS (SELECT 1 FROM webhook_queue AS q
                    WHERE q.provider = webhook_event.provider
                      AND q.event_id = webhook_event.event_id)
RETURNING attempt;
