-- Record an attempt's result, fenced: only if the row is still processing at that attempt.
-- A queued event's row (one with a queue entry) is never written here: settle_queued_*.sql.
UPDATE webhook_event
   SET state = :state,
       {{recorded_result}},
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE provider = :provider AND event_id = :event_id
   AND attempt = :attempt AND state = 'processing'
   AND NOT EXISTS (SELECT 1 FROM webhook_queue AS q
                    WHERE q.provider = webhook_event.provider
                      AND q.event_id = webhook_event.event_id)
RETURNING attempt;
