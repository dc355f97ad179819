-- Every recorded attempt of one event, oldest first (webhook_attempt_event_idx, in order).
-- Times as epoch seconds, the owner as written (the lease owner with its call token).
SELECT attempt,
       extract(epoch FROM started_at)::float8 AS started_at,
       extract(epoch FROM finished_at)::float8 AS finished_at,
       owner, outcome, response_status, latency_ms, state, error
  FROM webhook_attempt
 WHERE provider = :provider::text AND event_id = :event_id::text
 ORDER BY finished_at;
