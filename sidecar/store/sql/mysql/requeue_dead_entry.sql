-- requeue_dead_entry: a dead entry due again with a fresh budget (from its row's attempt).
UPDATE webhook_queue
   SET due_at = {{now}}, queued_at = {{now}}, base_attempt = :attempt, lease_owner = NULL
 WHERE provider = :provider AND event_id = :event_id;
