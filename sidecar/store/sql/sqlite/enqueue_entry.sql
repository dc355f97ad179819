-- Queue mode's claim, step 2 of 2, run only when enqueue_event.sql inserted the row (same
-- transaction): its queue entry, due now (the row's received_at), tries 0, with :order_key.
-- seq, the order of acceptance, is the new rowid. :owner, the enqueue call's token, is kept
-- as in PostgreSQL's enqueue.sql (SQLite needs it for nothing: a call either commits whole
-- or fails whole on the one connection).
INSERT INTO webhook_queue (
    provider, event_id, due_at, queued_at, base_attempt, tries, order_key, lease_owner
)
SELECT provider, event_id, received_at, received_at, 0, 0, :order_key, :owner
  FROM webhook_event
 WHERE provider = :provider AND event_id = :event_id;
