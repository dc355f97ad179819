-- Re-drive, step 1 (sqlite/transactions.py runs the steps inside BEGIN IMMEDIATE): up to
-- :limit dead entries of :provider, oldest accepted first (:event_id names one, or NULL; only
-- rows received more than :older_than seconds ago unless NULL), due now with a fresh budget:
-- queued_at now, base_attempt = the row's attempt. The entry keeps its seq and its last_error.
-- Answers the event ids with their seq; step 2 (requeue_dead_event.sql) runs for each.
UPDATE webhook_queue
   SET due_at = (julianday('now') - 2440587.5) * 86400.0,
       queued_at = (julianday('now') - 2440587.5) * 86400.0,
       base_attempt = (SELECT e.attempt FROM webhook_event AS e
                        WHERE e.provider = webhook_queue.provider
                          AND e.event_id = webhook_queue.event_id),
       lease_owner = NULL
 WHERE seq IN (
       SELECT q.seq
         FROM webhook_queue AS q
         JOIN webhook_event AS e ON e.provider = q.provider AND e.event_id = q.event_id
        WHERE q.provider = :provider
          AND q.due_at IS NULL AND e.state = 'dead'
          AND (:event_id IS NULL OR q.event_id = :event_id)
          AND (:older_than IS NULL OR e.received_at < (julianday('now') - 2440587.5) * 86400.0 - :older_than)
        ORDER BY q.seq
        LIMIT :limit)
RETURNING event_id, seq;
