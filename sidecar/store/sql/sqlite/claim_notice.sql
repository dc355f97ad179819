-- Claim the right to send one notification (see the PostgreSQL file): insert the row, or move
-- its sent_at to now if the last message was claimed :interval_s seconds ago or more. One
-- statement, its own transaction: SQLite takes the write lock before the upsert reads the row,
-- so two processes sharing the file cannot both win. No row back: within the interval.
INSERT INTO webhook_notice (target, kind, provider, sent_at)
VALUES (:target, :kind, :provider, (julianday('now') - 2440587.5) * 86400.0)
ON CONFLICT (target, kind, provider) DO UPDATE
   SET sent_at = excluded.sent_at
 WHERE webhook_notice.sent_at <= excluded.sent_at - :interval_s
RETURNING 1 AS claimed;
