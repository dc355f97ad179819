-- queue_entry: one event's queue entry.
SELECT provider, event_id, due_at, tries, queued_at, order_key, last_error, {{now}} AS now
  FROM webhook_queue
 WHERE provider = :provider AND event_id = :event_id;
