-- The attempts timeline's row for each result `written` recorded (complete.sql,
-- complete_batch.sql): started = finished − latency, the owner the write cleared, no error
-- (forward mode). Spliced where a query says {{written_attempt}}.
INSERT INTO webhook_attempt (provider, event_id, attempt, started_at, finished_at, owner,
                                 outcome, response_status, latency_ms, state, error)
    SELECT provider, event_id, attempt,
           updated_at - make_interval(secs => latency_ms / 1000.0), updated_at, lease_owner,
           outcome, response_status, latency_ms, state, NULL
      FROM written
