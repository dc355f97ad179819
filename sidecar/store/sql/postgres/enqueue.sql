-- Queue mode's claim, in one autocommitted statement at READ COMMITTED: insert (:provider,
-- :event_id) as a 'queued' row at attempt 0 with its request (:payload_body, :payload_request
-- JSON text) and no lease, together with its queue entry (due now, :order_key, tries 0), unless
-- the key exists or the provider's queue is full. :max_depth NULL: no limit. :owner is unique
-- to the call and kept on the new entry (until its first take) for enqueue_landed.sql.
--
-- Answers exactly one row: `accepted`, `full`, and the columns of an EventRow (all NULL when
-- there is no existing row to show).
--
-- * accepted = true: this statement inserted the row and its entry, and notified the
--   provider's workers in every process (pg_notify, delivered at commit).
-- * an existing row: the key was queued (or claimed in forward mode) before this statement's
--   snapshot. Answered as existing even when the queue is full: a redelivery of an accepted
--   event is never refused.
-- * full = true and no row: the provider has :max_depth entries or more waiting or in flight
--   (dead ones do not count), and the key is not there: nothing was written. The count stops
--   at :max_depth entries (it walks webhook_queue_due_idx), and only runs with a :max_depth.
--   Concurrent enqueues each count what their snapshot shows, so the queue may overshoot
--   :max_depth by as many as arrive together: a bound against a backlog, not an exact cap.
-- * neither, and no row: a competitor inserted the key and committed after this statement's
--   snapshot (the INSERT waited for it, then did nothing), exactly as in claim.sql. The caller
--   reads the row with a new statement (get.sql); if there is none, the competitor rolled back
--   or the row was purged in between, and the caller enqueues again. (With a full queue, a
--   competitor committing after the snapshot is answered `full` instead: the provider retries
--   later and is then answered the existing row.)
WITH t AS MATERIALIZED (
    SELECT clock_timestamp() AS ts
), room AS (
    SELECT CASE WHEN :max_depth::integer IS NULL THEN true
                ELSE (SELECT count(*)
                        FROM (SELECT 1
                                FROM webhook_queue
                               WHERE provider = :provider::text AND due_at IS NOT NULL
                               LIMIT :max_depth::integer) AS pending) < :max_depth::integer
           END AS ok
), ins AS (
    INSERT INTO webhook_event AS e (
        provider, event_id, received_at, body_sha256, state, attempt,
        lease_owner, lease_until, updated_at, payload_body, payload_request
    )
    SELECT :provider::text, :event_id::text, t.ts, :body_sha256::bytea, 'queued', 0,
           NULL, NULL, t.ts, :payload_body::bytea, :payload_request::text::jsonb
      FROM t, room
     WHERE room.ok
    ON CONFLICT DO NOTHING
    RETURNING e.provider, e.event_id, e.received_at
), entry AS (
    INSERT INTO webhook_queue AS q (
        provider, event_id, due_at, queued_at, base_attempt, tries, order_key, lease_owner
    )
    SELECT ins.provider, ins.event_id, ins.received_at, ins.received_at, 0, 0,
           :order_key::text, :owner::text
      FROM ins
    RETURNING q.provider
), woke AS (
    SELECT count(*) AS n
      FROM entry, LATERAL pg_notify('webhook_sidecar_queue', entry.provider) AS notified
)
SELECT woke.n > 0 AS accepted, NOT room.ok AS full, existing.*
  FROM woke
 CROSS JOIN room
  LEFT JOIN (SELECT {{event_row}}, {{in_queue}}
               FROM webhook_event AS e
              WHERE provider = :provider::text AND event_id = :event_id::text
                AND NOT EXISTS (SELECT 1 FROM ins)) AS existing ON true;
