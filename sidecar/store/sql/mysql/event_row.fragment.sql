-- The columns of an event row as rows.event_row reads them (with in_queue beside).
e.provider, e.event_id, e.state, e.attempt, e.body_sha256, e.received_at, e.updated_at,
e.lease_until, e.outcome, e.response_status, e.response_headers, e.response_body,
e.latency_ms, {{now}} AS now
