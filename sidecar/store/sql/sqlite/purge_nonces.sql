-- Retention for nonces: up to :batch_size of :provider older than :older_than, oldest first.
-- Answers one row per deleted nonce.
DELETE FROM webhook_nonce
 WHERE rowid IN (
       SELECT rowid FROM webhook_nonce
        WHERE provider = :provider
          AND received_at < (julianday('now') - 2440587.5) * 86400.0 - :older_than
        ORDER BY received_at
        LIMIT :batch_size)
RETURNING 1 AS deleted;
