-- Retention: delete up to :batch_size rows of :provider received more than :older_than seconds
-- ago, oldest first, never a processing row whose lease is live. Answers one row per deleted row
-- (SQLite cannot count inside the statement).
DELETE FROM webhook_event
 WHERE rowid IN (
       SELECT rowid
         FROM webhook_event
        WHERE provider = :provider
          AND received_at < (julianday('now') - 2440587.5) * 86400.0 - :older_than
          AND (state <> 'processing'
               OR lease_until IS NULL
               OR lease_until <= (julianday('now') - 2440587.5) * 86400.0)
        ORDER BY received_at
        LIMIT :batch_size)
RETURNING 1 AS deleted;
