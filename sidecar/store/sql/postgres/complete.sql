-- Record the result of :attempt, fenced: only if the row is still processing at that attempt.
-- :state is 'done' or 'failed'; :response_headers is JSON text. A row another session holds is
-- given up on after ~100 ms (row_lock_wait.fragment.sql): RowLocked, and the forwarder tries
-- again within the lease. Answers the attempt, or no row when the attempt was superseded.
-- A queued event's row (one with a queue entry) is never written here: its tries are settled
-- by settle_queued.sql, fenced by the entry's take counter.
UPDATE webhook_event AS e
   SET state = :state::text,
       {{recorded_result}},
       updated_at = clock_timestamp()
 WHERE provider = :provider::text AND event_id = :event_id::text
   AND attempt = :attempt::integer AND state = 'processing'
   AND {{row_lock_wait}}
   AND NOT EXISTS (SELECT 1 FROM webhook_queue AS q
                    WHERE q.provider = e.provider AND q.event_id = e.event_id)
RETURNING attempt;
