-- Every recorded attempt of one event, oldest first (webhook_attempt_event_idx, in order;
-- rowid breaks a tie of two attempts written within one clock tick).
SELECT attempt, started_at, finished_at, owner, outcome, response_status, latency_ms, state,
       error
  FROM webhook_attempt
 WHERE provider = :provider AND event_id = :event_id
 ORDER BY finished_at, rowid;
