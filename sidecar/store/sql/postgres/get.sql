-- One row with the database clock. $1 provider, $2 event_id.
SELECT provider, event_id, state, attempt, body_sha256,
       extract(epoch FROM received_at)::float8 AS received_at,
       extract(epoch FROM updated_at)::float8 AS updated_at,
       extract(epoch FROM lease_until)::float8 AS lease_until,
       outcome, response_status, response_headers::text AS response_headers, response_body,
       latency_ms,
       extract(epoch FROM clock_timestamp())::float8 AS now
  FROM webhook_event
 WHERE provider = $1::text AND event_id = $2::text;
