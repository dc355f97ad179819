-- attempts: one event's timeline, in order.
SELECT attempt, started_at, finished_at, owner, outcome, response_status, latency_ms, state,
       error
  FROM webhook_attempt
 WHERE provider = :provider AND event_id = :event_id
 ORDER BY finished_at, id;
