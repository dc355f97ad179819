-- Take over a failed row, or a processing row whose lease has expired, for a new attempt leased
-- to :owner for :lease_seconds.
-- Race-free at READ COMMITTED: concurrent takers block on the row lock, then re-check the WHERE
-- clause against the winner's version (a live lease) and update nothing. A row another session
-- holds for longer is given up on after ~100 ms (row_lock_wait.fragment.sql): SQLSTATE 55P03,
-- which the adapter raises as RowLocked (the delivery answers 409, as for an attempt in flight).
-- A processing row without a lease (never written by this code) counts as expired, matching
-- EventRow.lease_live; a lease ending exactly now counts as expired.
-- On a partitioned store, partition retention holds an advisory lock while it looks at a
-- partition and detaches it (webhook_partition_detach, partitioning/functions.sql: the key is
-- hashtextextended('webhook_partition_retire', 0)); a take-over holds it shared, so that no
-- lease is taken in a partition between that look and its detach. It waits for the lock as
-- for a row (the lock_timeout above) and answers RowLocked: rare, as take-overs are. The lock
-- costs an unpartitioned store one shared lock per take-over and nothing else.
-- A row with a queue entry (queue mode) is never taken over: its delivery workers take it
-- (take_queued.sql), and an expired lease there is their crashed worker's. The entry exists for
-- as long as such a row is 'processing' (it goes only with the 'done' state), so the snapshot's
-- answer to NOT EXISTS holds when the row is re-checked.
UPDATE webhook_event AS e
   SET state = 'processing',
       attempt = attempt + 1,
       lease_owner = :owner::text,
       lease_until = clock_timestamp() + make_interval(secs => :lease_seconds::float8),
       updated_at = clock_timestamp(),
       outcome = NULL,
       response_status = NULL,
       response_headers = NULL,
       response_body = NULL,
       latency_ms = NULL
 WHERE provider = :provider::text AND event_id = :event_id::text
   AND {{row_lock_wait}}
   AND (SELECT pg_advisory_xact_lock_shared(hashtextextended('webhook_partition_retire', 0))
        ::text) IS NOT NULL
   AND (state = 'failed'
        OR (state = 'processing'
            AND (lease_until IS NULL OR lease_until <= clock_timestamp())))
   AND NOT EXISTS (SELECT 1 FROM webhook_queue AS q
                    WHERE q.provider = e.provider AND q.event_id = e.event_id)
RETURNING attempt;
