-- enqueue_entry: its queue entry, due at once.
INSERT INTO webhook_queue (
    provider, event_id, due_at, queued_at, base_attempt, tries, order_key, lease_owner
)
SELECT provider, event_id, received_at, received_at, 0, 0, :order_key, :owner
  FROM webhook_event
 WHERE provider = :provider AND event_id = :event_id;
