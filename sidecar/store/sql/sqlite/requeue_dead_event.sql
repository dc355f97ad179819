-- Re-drive, step 2, per entry of requeue_dead_entries.sql: the dead row is 'queued' again.
UPDATE webhook_event
   SET state = 'queued',
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE provider = :provider AND event_id = :event_id AND state = 'dead';
