-- The columns of an EventRow (sidecar/store/rows.py event_row), times as Unix epoch seconds,
-- with the database clock as `now`: spliced in where a query says {{event_row}}.
provider, event_id, state, attempt, body_sha256,
extract(epoch FROM received_at)::float8 AS received_at,
extract(epoch FROM updated_at)::float8 AS updated_at,
extract(epoch FROM lease_until)::float8 AS lease_until,
outcome, response_status, response_headers::text AS response_headers, response_body,
latency_ms,
extract(epoch FROM clock_timestamp())::float8 AS now
