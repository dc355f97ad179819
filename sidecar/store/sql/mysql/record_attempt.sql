-- record_attempt: one try in the timeline (written with the result, same transaction).
INSERT INTO webhook_attempt (provider, event_id, attempt, started_at, finished_at, owner,
                             outcome, response_status, latency_ms, state, error)
VALUES (:provider, :event_id, :attempt, ROUND({{now}} - :latency_ms / 1000, 6), {{now}},
        :lease_owner, :outcome, :response_status, :latency_ms, :state, :error);
