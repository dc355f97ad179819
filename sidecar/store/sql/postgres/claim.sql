-- Claim (:provider, :event_id) in one autocommitted statement at READ COMMITTED, leased to
-- :owner for :lease_seconds. :payload_body and :payload_request (JSON text) are both NULL unless
-- the provider keeps payloads.
--
-- The winner gets its inserted row (won = true). A loser whose competitor committed before this
-- statement's snapshot gets the existing row (won = false). A loser whose competitor committed
-- after the snapshot (the INSERT waited for it, then did nothing) gets no row at all: the caller
-- then reads the row with a new statement (get.sql). Only an existing row can have a queue entry:
-- the probe runs on that branch alone.
WITH t AS (
    SELECT clock_timestamp() AS ts
), ins AS (
    INSERT INTO webhook_event AS e (
        provider, event_id, received_at, body_sha256, state, attempt,
        lease_owner, lease_until, updated_at, payload_body, payload_request
    )
    SELECT :provider::text, :event_id::text, t.ts, :body_sha256::bytea, 'processing', 1,
           :owner::text, t.ts + make_interval(secs => :lease_seconds::float8), t.ts,
           :payload_body::bytea, :payload_request::text::jsonb
      FROM t
    ON CONFLICT DO NOTHING
    RETURNING e.provider, e.event_id, e.state, e.attempt, e.body_sha256, e.received_at,
              e.updated_at, e.lease_until, e.outcome, e.response_status, e.response_headers,
              e.response_body, e.latency_ms
)
SELECT true AS won, {{event_row}}, false AS in_queue
  FROM ins
UNION ALL
SELECT false AS won, {{event_row}}, {{in_queue}}
  FROM webhook_event AS e
 WHERE provider = :provider::text AND event_id = :event_id::text
   AND NOT EXISTS (SELECT 1 FROM ins);
