-- Claim (provider, event_id) in one autocommitted statement at READ COMMITTED.
-- $1 provider, $2 event_id, $3 body_sha256, $4 lease seconds, $5 lease owner,
-- $6 payload body and $7 payload request (JSON text), both NULL unless the provider keeps payloads.
--
-- The winner gets its inserted row (won = true). A loser whose competitor committed before this
-- statement's snapshot gets the existing row (won = false). A loser whose competitor committed
-- after the snapshot (the INSERT waited for it, then did nothing) gets no row at all: the caller
-- then reads the row with a new statement (get.sql).
WITH t AS (
    SELECT clock_timestamp() AS ts
), ins AS (
    INSERT INTO webhook_event AS e (
        provider, event_id, received_at, body_sha256, state, attempt,
        lease_owner, lease_until, updated_at, payload_body, payload_request
    )
    SELECT $1::text, $2::text, t.ts, $3::bytea, 'processing', 1,
           $5::text, t.ts + make_interval(secs => $4::float8), t.ts, $6::bytea, $7::text::jsonb
      FROM t
    ON CONFLICT (provider, event_id) DO NOTHING
    RETURNING e.provider, e.event_id, e.state, e.attempt, e.body_sha256, e.received_at,
              e.updated_at, e.lease_until, e.outcome, e.response_status, e.response_headers,
              e.response_body, e.latency_ms
)
SELECT true AS won,
       provider, event_id, state, attempt, body_sha256,
       extract(epoch FROM received_at)::float8 AS received_at,
       extract(epoch FROM updated_at)::float8 AS updated_at,
       extract(epoch FROM lease_until)::float8 AS lease_until,
       outcome, response_status, response_headers::text AS response_headers, response_body,
       latency_ms,
       extract(epoch FROM clock_timestamp())::float8 AS now
  FROM ins
UNION ALL
SELECT false AS won,
       provider, event_id, state, attempt, body_sha256,
       extract(epoch FROM received_at)::float8 AS received_at,
       extract(epoch FROM updated_at)::float8 AS updated_at,
       extract(epoch FROM lease_until)::float8 AS lease_until,
       outcome, response_status, response_headers::text AS response_headers, response_body,
       latency_ms,
       extract(epoch FROM clock_timestamp())::float8 AS now
  FROM webhook_event
 WHERE provider = $1::text AND event_id = $2::text
   AND NOT EXISTS (SELECT 1 FROM ins);
