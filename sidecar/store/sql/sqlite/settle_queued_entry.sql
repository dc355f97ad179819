-- Settle, step 2 for 'queued' and 'dead', after settle_queued_event.sql wrote the row: the
-- entry is due again in :retry_in seconds ('queued') or dead (due_at NULL), keeps :error, and
-- is no longer held.
UPDATE webhook_queue
   SET due_at = CASE WHEN :state = 'queued' THEN (julianday('now') - 2440587.5) * 86400.0 + coalesce(:retry_in, 0.0) END,
       last_error = :error,
       lease_owner = NULL
 WHERE provider = :provider AND event_id = :event_id AND tries = :tries;
