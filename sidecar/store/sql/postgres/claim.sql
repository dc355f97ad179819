-- Claim (:provider, :event_id) in one autocommitted statement at READ COMMITTED, leased to
-- :owner for :lease_seconds. :payload_body and :payload_request (JSON text) are both NULL unless
-- the provider keeps payloads.
--
-- A guarded claim (:guard_key not NULL; the replay guard, sidecar/delivery/steps.py) first
-- binds :guard_key of :provider in webhook_nonce to :guard_digest unless it is bound already,
-- as bind_nonce.sql does, and inserts the event row only if the key is then bound to
-- :guard_digest: a replayed body never creates a row nor wins a claim. The binding is made
-- whatever the claim then finds (an existing row keeps the guard as a claim after a separate
-- bind did). One statement, one commit, for both. :guard_key NULL: no binding is asked for or
-- made, and the claim is as it always was.
--
-- Answers exactly one row: `won`, the columns of an EventRow (all NULL when there is no row to
-- show) and the guard's binding (guard.fragment.sql: NULL without a guard, or when unsettled).
--
-- * won = true: this statement inserted the row (and bound the guard, or found it bound to
--   :guard_digest).
-- * won = false, the existing row: a competitor committed the key before this statement's
--   snapshot. (The adapter answers a binding to another digest as a replay, row or not.)
-- * no event row, the binding to :guard_digest: a competitor inserted the key and committed
--   after this statement's snapshot (the INSERT waited for it, then did nothing). The caller
--   reads the row with a new statement (get.sql). Unguarded claims the same, without a binding.
-- * no binding from a guarded claim: a competitor bound the key and committed after this
--   statement's snapshot (the bind waited for it, then did nothing), so the statement could
--   not tell whose digest holds and inserted no row. The caller runs the claim again: a new
--   statement sees the binding.
-- * a binding to another digest: the replay guard refuses; nothing was inserted. (The event
--   columns show the existing row if there is one; the adapter does not read them.)
--
-- The nonce is inserted before the event row (the event's INSERT reads the bind's RETURNING),
-- in every claim and claim batch: two statements wait for each other in one direction only.
-- Only an existing row can have a queue entry: the probe runs on that branch alone.
WITH t AS (
    SELECT clock_timestamp() AS ts
), bind AS (
    INSERT INTO webhook_nonce AS w (provider, nonce, body_sha256, received_at)
    SELECT :provider::text, :guard_key::text, :guard_digest::bytea, t.ts
      FROM t
     WHERE :guard_key::text IS NOT NULL
    ON CONFLICT DO NOTHING
    RETURNING w.body_sha256, w.received_at
), g AS (
    SELECT body_sha256 AS guard_sha256, received_at AS guard_received_at
      FROM bind
    UNION ALL
    SELECT w.body_sha256, w.received_at
      FROM webhook_nonce AS w
     WHERE w.provider = :provider::text AND w.nonce = :guard_key::text
       AND NOT EXISTS (SELECT 1 FROM bind)
), ins AS (
    INSERT INTO webhook_event AS e (
        provider, event_id, received_at, body_sha256, state, attempt,
        lease_owner, lease_until, updated_at, payload_body, payload_request
    )
    SELECT :provider::text, :event_id::text, t.ts, :body_sha256::bytea, 'processing', 1,
           :owner::text, t.ts + make_interval(secs => :lease_seconds::float8), t.ts,
           :payload_body::bytea, :payload_request::text::jsonb
      FROM t
     WHERE :guard_key::text IS NULL
        OR EXISTS (SELECT 1 FROM g WHERE g.guard_sha256 = :guard_digest::bytea)
    ON CONFLICT DO NOTHING
    RETURNING e.provider, e.event_id, e.state, e.attempt, e.body_sha256, e.received_at,
              e.updated_at, e.lease_until, e.outcome, e.response_status, e.response_headers,
              e.response_body, e.latency_ms
), found AS (
    SELECT true AS won, {{event_row}}, false AS in_queue
      FROM ins
    UNION ALL
    SELECT false AS won, {{event_row}}, {{in_queue}}
      FROM webhook_event AS e
     WHERE provider = :provider::text AND event_id = :event_id::text
       AND NOT EXISTS (SELECT 1 FROM ins)
)
SELECT f.*, {{guard}}
  FROM (SELECT 1) AS one
  LEFT JOIN found AS f ON true
  LEFT JOIN g ON true;
