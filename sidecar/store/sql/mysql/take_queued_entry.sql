-- take_queued_entry: the entry taken: one more try, due again when the lease ends.
UPDATE webhook_queue
   SET tries = tries + 1, due_at = ROUND({{now}} + :lease_seconds, 6), lease_owner = :owner
 WHERE provider = :provider AND event_id = :event_id;
