-- Take over a failed row, or a processing row whose lease has expired (a lease ending exactly
-- now counts as expired, as in EventRow.lease_live). One statement: SQLite takes the write lock
-- before reading, so of concurrent takers (threads or processes) exactly one matches.
-- A row with a queue entry (queue mode) is never taken over: its delivery workers take it.
UPDATE webhook_event
   SET {{new_attempt}}
 WHERE provider = :provider AND event_id = :event_id
   AND (state = 'failed'
        OR (state = 'processing'
            AND (lease_until IS NULL
                 OR lease_until <= (julianday('now') - 2440587.5) * 86400.0)))
   AND NOT EXISTS (SELECT 1 FROM webhook_queue AS q
                    WHERE q.provider = webhook_event.provider
                      AND q.event_id = webhook_event.event_id)
RETURNING attempt;
