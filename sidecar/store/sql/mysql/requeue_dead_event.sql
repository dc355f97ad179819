-- requeue_dead_event: its row queued again.
UPDATE webhook_event SET state = 'queued', updated_at = {{now}}
 WHERE provider = :provider AND event_id = :event_id AND state = 'dead';
