-- One event's queue entry, with the database clock (no row: not queued, or done).
SELECT provider, event_id, extract(epoch FROM due_at)::float8 AS due_at, tries,
       extract(epoch FROM queued_at)::float8 AS queued_at, order_key, last_error,
       extract(epoch FROM clock_timestamp())::float8 AS now
  FROM webhook_queue
 WHERE provider = :provider::text AND event_id = :event_id::text;
