-- Take over a failed row, or a processing row whose lease has expired, for a new attempt.
-- $1 provider, $2 event_id, $3 lease seconds, $4 lease owner.
-- Race-free at READ COMMITTED: concurrent takers block on the row lock, then re-check the WHERE
-- clause against the winner's version (a live lease) and update nothing.
-- A processing row without a lease (never written by this code) counts as expired, matching
-- EventRow.lease_live; a lease ending exactly now counts as expired.
UPDATE webhook_event
   SET state = 'processing',
       attempt = attempt + 1,
       lease_owner = $4::text,
       lease_until = clock_timestamp() + make_interval(secs => $3::float8),
       updated_at = clock_timestamp(),
       outcome = NULL,
       response_status = NULL,
       response_headers = NULL,
       response_body = NULL,
       latency_ms = NULL
 WHERE provider = $1::text AND event_id = $2::text
   AND (state = 'failed'
        OR (state = 'processing'
            AND (lease_until IS NULL OR lease_until <= clock_timestamp())))
RETURNING attempt;
