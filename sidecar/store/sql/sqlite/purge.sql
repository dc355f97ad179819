-- Retention: delete up to :batch_size rows of :provider received more than :older_than seconds
-- ago, oldest first, never a processing row whose lease is live. Answers one row per deleted row
-- (SQLite cannot count inside the statement). A row whose queue entry is waiting or in flight
-- is never deleted, however old (queue mode: the event is still to be delivered); a dead one
-- is, and its entry with it (ON DELETE CASCADE; the connection enforces foreign keys). An
-- event's attempts (webhook_attempt) go with it the same way, in this statement.
DELETE FROM webhook_event
 WHERE rowid IN (
       SELECT rowid
         FROM webhook_event
        WHERE provider = :provider
          AND received_at < (julianday('now') - 2440587.5) * 86400.0 - :older_than
          AND (state <> 'processing'
               OR lease_until IS NULL
               OR lease_until <= (julianday('now') - 2440587.5) * 86400.0)
          AND NOT EXISTS (SELECT 1 FROM webhook_queue AS q
                           WHERE q.provider = webhook_event.provider
                             AND q.event_id = webhook_event.event_id
                             AND q.due_at IS NOT NULL)
        ORDER BY received_at
        LIMIT :batch_size)
RETURNING 1 AS deleted;
