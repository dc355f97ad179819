-- Take over a failed row, or a processing row whose lease has expired, for a new attempt leased
-- to :owner for :lease_seconds.
-- Race-free at READ COMMITTED: concurrent takers block on the row lock, then re-check the WHERE
-- clause against the winner's version (a live lease) and update nothing. A row another session
-- holds for longer is given up on after ~100 ms (row_lock_wait.fragment.sql): SQLSTATE 55P03,
-- which the adapter raises as RowLocked (the delivery answers 409, as for an attempt in flight).
-- A processing row without a lease (never written by this code) counts as expired, matching
-- EventRow.lease_live; a lease ending exactly now counts as expired.
UPDATE webhook_event
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
   AND (state = 'failed'
        OR (state = 'processing'
            AND (lease_until IS NULL OR lease_until <= clock_timestamp())))
RETURNING attempt;
