-- Take, step 2, per entry picked by take_queued_pick.sql: the take counter goes up (the fence
-- the worker's settle names), the entry is held by :owner and due again when the lease ends.
UPDATE webhook_queue
   SET tries = tries + 1,
       due_at = (julianday('now') - 2440587.5) * 86400.0 + :lease_seconds,
       lease_owner = :owner
 WHERE provider = :provider AND event_id = :event_id
RETURNING tries, base_attempt, queued_at;
