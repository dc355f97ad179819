-- Claims that arrived while another claim was in flight (sidecar/store/coalesce.py), in one
-- autocommitted statement at READ COMMITTED: one commit, one WAL flush for all of them. Each item
-- is one call of claim.sql; every parameter is an array with one element per item, in item order
-- (:owner unique to each call, :payload_request JSON text or NULL). Answers one row per item that
-- found its key, numbered by `item` (1-based):
--
-- * won = true: the item's row was inserted by this statement, leased to the item's own :owner.
-- * won = false, a sibling's row: another item of this batch claims the same key. The first of
--   them in item order inserted it and won (DISTINCT ON): two claims of one key in one batch
--   behave like two concurrent claims, exactly one wins. The row comes from RETURNING: the
--   statement's snapshot cannot see what the statement itself inserted.
-- * won = false, the existing row: the key was claimed before this statement's snapshot.
-- * no row for the item: a competitor in another session inserted the key and committed after
--   this statement's snapshot (the INSERT waited for it, then did nothing), exactly as in
--   claim.sql. The caller reads the row with a new statement (get.sql); if there is none, the
--   competitor rolled back or the row was purged in between, and the caller claims again.
--
-- Keys are inserted in (provider, event_id) order, in every batch: two batches inserting the
-- same keys wait for each other in one direction only and cannot deadlock. (Should one be
-- chosen as a deadlock victim anyway, the adapter runs its items one by one.)
-- The NOT EXISTS keeps a row this statement's snapshot still shows, but that was deleted and
-- inserted anew by this very statement (a purge committed in between), from answering twice.
WITH t AS (
    SELECT clock_timestamp() AS ts
), item AS (
    SELECT *
      FROM unnest(:provider::text[], :event_id::text[], :body_sha256::bytea[], :owner::text[],
                  :lease_seconds::float8[], :payload_body::bytea[], :payload_request::text[])
           WITH ORDINALITY AS i(key_provider, key_event_id, item_sha256, item_owner, item_lease,
                                item_body, item_request, n)
), ins AS (
    INSERT INTO webhook_event AS e (
        provider, event_id, received_at, body_sha256, state, attempt,
        lease_owner, lease_until, updated_at, payload_body, payload_request
    )
    SELECT DISTINCT ON (i.key_provider, i.key_event_id)
           i.key_provider, i.key_event_id, t.ts, i.item_sha256, 'processing', 1,
           i.item_owner, t.ts + make_interval(secs => i.item_lease), t.ts,
           i.item_body, i.item_request::jsonb
      FROM item AS i CROSS JOIN t
     ORDER BY i.key_provider, i.key_event_id, i.n
    ON CONFLICT DO NOTHING
    RETURNING e.provider, e.event_id, e.lease_owner, e.state, e.attempt, e.body_sha256,
              e.received_at, e.updated_at, e.lease_until, e.outcome, e.response_status,
              e.response_headers, e.response_body, e.latency_ms
), found AS (
    SELECT true AS inserted, false AS in_queue, ins.*  -- inserted now: no queue entry
      FROM ins
    UNION ALL
    SELECT false AS inserted, {{in_queue}}, e.provider, e.event_id, e.lease_owner, e.state,
           e.attempt, e.body_sha256, e.received_at, e.updated_at, e.lease_until, e.outcome,
           e.response_status, e.response_headers, e.response_body, e.latency_ms
      FROM webhook_event AS e
     WHERE (e.provider, e.event_id) IN (SELECT key_provider, key_event_id FROM item)
       AND NOT EXISTS (SELECT 1 FROM ins
                        WHERE ins.provider = e.provider AND ins.event_id = e.event_id)
)
SELECT i.n AS item, (f.inserted AND f.lease_owner = i.item_owner) AS won, {{event_row}},
       in_queue
  FROM item AS i
  JOIN found AS f ON f.provider = i.key_provider AND f.event_id = i.key_event_id;
