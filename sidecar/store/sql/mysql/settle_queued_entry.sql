-- settle_queued_entry: the entry due again after :retry_in, or dead (due_at NULL).
UPDATE webhook_queue
   SET due_at = CASE WHEN :state = 'queued' THEN ROUND({{now}} + COALESCE(:retry_in, 0), 6) END,
       last_error = :error,
       lease_owner = NULL
 WHERE provider = :provider AND event_id = :event_id AND tries = :tries;
