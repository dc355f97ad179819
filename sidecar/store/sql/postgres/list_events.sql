-- Rows newest first. $1 provider or NULL, $2 state or NULL, $3 limit,
-- $4 minimum age in seconds or NULL.
SELECT provider, event_id, state, attempt, body_sha256,
       extract(epoch FROM received_at)::float8 AS received_at,
       extract(epoch FROM updated_at)::float8 AS updated_at,
       extract(epoch FROM lease_until)::float8 AS lease_until,
       outcome, response_status, response_headers::text AS response_headers, response_body,
       latency_ms,
       extract(epoch FROM clock_timestamp())::float8 AS now
  FROM webhook_event
 WHERE ($1::text IS NULL OR provider = $1::text)
   AND ($2::text IS NULL OR state = $2::text)
   AND ($4::float8 IS NULL OR received_at < clock_timestamp() - make_interval(secs => $4::float8))
 ORDER BY received_at DESC, provider, event_id
 LIMIT $3::integer;
