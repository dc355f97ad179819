-- The columns of an EventRow (sidecar/store/rows.py event_row), with the database clock as
-- `now`: spliced in where a query says {{event_row}}.
provider, event_id, state, attempt, body_sha256, received_at, updated_at, lease_until,
outcome, response_status, response_headers, response_body, latency_ms,
(julianday('now') - 2440587.5) * 86400.0 AS now
