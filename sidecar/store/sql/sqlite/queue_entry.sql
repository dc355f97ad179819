-- One event's queue entry, with the database clock (no row: not queued, or done).
SELECT provider, event_id, due_at, tries, queued_at, order_key, last_error,
       (julianday('now') - 2440587.5) * 86400.0 AS now
  FROM webhook_queue
 WHERE provider = :provider AND event_id = :event_id;
