-- Claims that arrived while another claim was in flight (sidecar/store/coalesce.py), in one
-- autocommitted statement at READ COMMITTED: one commit, one WAL flush for all of them. Each item
-- is one call of claim.sql; every parameter is an array with one element per item, in item order
-- (:owner unique to each call, :payload_request JSON text or NULL, :guard_key and :guard_digest
-- NULL for an unguarded claim). Answers one row per item that found its key or its guard,
-- numbered by `item` (1-based), with the binding (guard.fragment.sql) beside the row:
--
-- * won = true: the item's row was inserted by this statement, leased to the item's own :owner.
-- * won = false, a sibling's row: another item of this batch claims the same key. The first of
--   them in item order whose guard (if any) holds inserted it and won (DISTINCT ON): two claims
--   of one key in one batch behave like two concurrent claims, exactly one wins. The row comes
--   from RETURNING: the statement's snapshot cannot see what the statement itself inserted.
-- * won = false, the existing row: the key was claimed before this statement's snapshot.
-- * no event row (with the item's binding, if guarded), or no row at all for the item: a
--   competitor in another session inserted the key and committed after this statement's
--   snapshot (the INSERT waited for it, then did nothing), exactly as in claim.sql. The caller
--   reads the row with a new statement (get.sql); if there is none, the competitor rolled back
--   or the row was purged in between, and the caller claims again.
-- * guarded items, as in claim.sql: the guard is bound first, the first item in item order
--   binding a key new to the batch (DISTINCT ON), so two guards of one key in one batch behave
--   like two concurrent guarded claims; an item whose guard is bound to another digest inserts
--   nothing (the adapter answers it as a replay); an item whose guard has no binding (bound by
--   another session after the snapshot) inserts nothing and is claimed again.
--
-- Nonces are inserted first, then event rows, each in (provider, key) order, in every batch (the
-- events' INSERT reads the binds' RETURNING, and sorts): two batches inserting the same keys
-- wait for each other in one direction only and cannot deadlock. (Should one be chosen as a
-- deadlock victim anyway, the adapter runs its items one by one.)
-- The NOT EXISTS keeps a row this statement's snapshot still shows, but that was deleted and
-- inserted anew by this very statement (a purge committed in between), from answering twice.
WITH t AS (
    SELECT clock_timestamp() AS ts
), item AS (
    SELECT *
      FROM unnest(:provider::text[], :event_id::text[], :body_sha256::bytea[], :owner::text[],
                  :lease_seconds::float8[], :payload_body::bytea[], :payload_request::text[],
                  :guard_key::text[], :guard_digest::bytea[])
           WITH ORDINALITY AS i(key_provider, key_event_id, item_sha256, item_owner, item_lease,
                                item_body, item_request, item_guard, item_guard_digest, n)
), bind AS (
    INSERT INTO webhook_nonce AS w (provider, nonce, body_sha256, received_at)
    SELECT DISTINCT ON (i.key_provider, i.item_guard)
           i.key_provider, i.item_guard, i.item_guard_digest, t.ts
      FROM item AS i CROSS JOIN t
     WHERE i.item_guard IS NOT NULL
     ORDER BY i.key_provider, i.item_guard, i.n
    ON CONFLICT DO NOTHING
    RETURNING w.provider, w.nonce, w.body_sha256, w.received_at
), g AS (
    SELECT provider AS guard_provider, nonce AS guard_key, body_sha256 AS guard_sha256,
           received_at AS guard_received_at
      FROM bind
    UNION ALL
    SELECT w.provider, w.nonce, w.body_sha256, w.received_at
      FROM webhook_nonce AS w
     WHERE (w.provider, w.nonce) IN (SELECT key_provider, item_guard FROM item
                                      WHERE item_guard IS NOT NULL)
       AND NOT EXISTS (SELECT 1 FROM bind
                        WHERE bind.provider = w.provider AND bind.nonce = w.nonce)
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
     WHERE i.item_guard IS NULL
        OR EXISTS (SELECT 1 FROM g
                    WHERE g.guard_provider = i.key_provider AND g.guard_key = i.item_guard
                      AND g.guard_sha256 = i.item_guard_digest)
     ORDER BY i.key_provider, i.key_event_id, i.n
    ON CONFLICT DO NOTHING
    RETURNING e.provider, e.event_id, e.lease_owner, e.state, e.attempt, e.body_sha256,
              e.received_at, e.updated_at, e.lease_until, e.outcome, e.response_status,
              e.response_headers, e.response_body, e.latency_ms
), found AS (
    SELECT true AS inserted, false AS in_queue, ins.*  -- inserted now: no queue entry
      FROM ins
    UNION ALL
    {{batch_found}}
)
SELECT i.n AS item, (f.inserted AND f.lease_owner = i.item_owner) AS won, {{event_row}},
       in_queue, {{guard}}
  FROM item AS i
  LEFT JOIN found AS f ON f.provider = i.key_provider AND f.event_id = i.key_event_id
  LEFT JOIN g ON g.guard_provider = i.key_provider AND g.guard_key = i.item_guard
 WHERE f.provider IS NOT NULL OR g.guard_key IS NOT NULL;
