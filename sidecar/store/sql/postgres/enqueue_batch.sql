-- Enqueues that arrived while another enqueue was in flight (sidecar/store/coalesce.py), in one
-- autocommitted statement at READ COMMITTED: one commit, one WAL flush for all of them. Each item
-- is one call of enqueue.sql; every parameter is an array with one element per item, in item
-- order (:owner unique to each call, :order_key and :max_depth NULL where the call has none).
-- Answers one row per item, numbered by `item` (1-based), with enqueue.sql's columns:
--
-- * accepted = true: this statement inserted the item's row and its entry (due now, tries 0,
--   holding the item's :owner until its first take, for enqueue_landed.sql), and notified the
--   provider's workers (pg_notify, once per provider, delivered at commit).
-- * an existing row, a sibling's: another item of this batch enqueues the same key. The first
--   of them in item order (with room) inserted it and was accepted (DISTINCT ON): two enqueues
--   of one key in one batch behave like two concurrent enqueues, exactly one is accepted; the
--   other is answered the new row (from RETURNING: the snapshot cannot see it).
-- * an existing row: the key was there before this statement's snapshot (even when the queue
--   is full, as in enqueue.sql).
-- * full = true and no row: the provider had the item's :max_depth entries or more waiting or in
--   flight in this statement's snapshot, and the key is not there: nothing written for it.
--   Each item counts what the snapshot shows, as concurrent enqueue.sql calls each count theirs:
--   a batch may overshoot :max_depth by its size (at most 64), as concurrent calls may by as
--   many as arrive together (docs/configuration.md: a bound against a backlog, not a cap).
-- * neither, and no row: a competitor in another session inserted the key and committed after
--   this statement's snapshot, exactly as in enqueue.sql; the caller reads the row (get.sql).
--
-- Keys are inserted into webhook_event in (provider, event_id) order, in every batch, as in
-- claim_batch.sql: two batches inserting the same keys cannot deadlock. Entries are inserted in
-- item order, so `seq` (the order of acceptance an order key follows) is the arrival order; an
-- entry's key is one this statement just inserted into webhook_event, so no other session can
-- be inserting it. The NOT EXISTS keeps a row the snapshot still shows, but that this very
-- statement deleted-and-inserted anew (a purge committed in between), from answering twice.
WITH t AS MATERIALIZED (
    SELECT clock_timestamp() AS ts
), item AS (
    SELECT *
      FROM unnest(:provider::text[], :event_id::text[], :body_sha256::bytea[],
                  :payload_body::bytea[], :payload_request::text[], :order_key::text[],
                  :max_depth::integer[], :owner::text[])
           WITH ORDINALITY AS i(key_provider, key_event_id, item_sha256, item_body,
                                item_request, item_order_key, item_max_depth, item_owner, n)
), depth AS (
    -- Per provider with a limit: its entries waiting or in flight, counted up to the largest
    -- limit asked (the walk stops there, as in enqueue.sql).
    SELECT p.key_provider,
           (SELECT count(*)
              FROM (SELECT 1
                      FROM webhook_queue
                     WHERE provider = p.key_provider AND due_at IS NOT NULL
                     LIMIT p.most) AS pending) AS pending
      FROM (SELECT key_provider, max(item_max_depth) AS most
              FROM item
             GROUP BY key_provider
            HAVING max(item_max_depth) IS NOT NULL) AS p
), room AS (
    SELECT i.*, (i.item_max_depth IS NULL OR d.pending < i.item_max_depth) AS ok
      FROM item AS i
      LEFT JOIN depth AS d ON d.key_provider = i.key_provider
), chosen AS (
    SELECT DISTINCT ON (r.key_provider, r.key_event_id) *
      FROM room AS r
     WHERE r.ok
     ORDER BY r.key_provider, r.key_event_id, r.n
), ins AS (
    INSERT INTO webhook_event AS e (
        provider, event_id, received_at, body_sha256, state, attempt,
        lease_owner, lease_until, updated_at, payload_body, payload_request
    )
    SELECT c.key_provider, c.key_event_id, t.ts, c.item_sha256, 'queued', 0,
           NULL, NULL, t.ts, c.item_body, c.item_request::jsonb
      FROM chosen AS c CROSS JOIN t
     ORDER BY c.key_provider, c.key_event_id
    ON CONFLICT DO NOTHING
    RETURNING e.provider, e.event_id, e.lease_owner, e.state, e.attempt, e.body_sha256,
              e.received_at, e.updated_at, e.lease_until, e.outcome, e.response_status,
              e.response_headers, e.response_body, e.latency_ms
), entry AS (
    INSERT INTO webhook_queue AS q (
        provider, event_id, due_at, queued_at, base_attempt, tries, order_key, lease_owner
    )
    SELECT ins.provider, ins.event_id, ins.received_at, ins.received_at, 0, 0,
           c.item_order_key, c.item_owner
      FROM ins
      JOIN chosen AS c ON c.key_provider = ins.provider AND c.key_event_id = ins.event_id
     ORDER BY c.n
    RETURNING q.provider
), woke AS (
    SELECT count(*) AS n
      FROM (SELECT DISTINCT provider FROM entry) AS p,
           LATERAL pg_notify('webhook_sidecar_queue', p.provider) AS notified
), found AS (
    SELECT true AS inserted, true AS in_queue, ins.*  -- inserted now, with its entry
      FROM ins
    UNION ALL
    {{batch_found}}
)
SELECT r.n AS item,
       coalesce(f.inserted AND r.n IN (SELECT c.n FROM chosen AS c), false) AS accepted,
       NOT r.ok AS full, {{event_row}}, in_queue
  FROM room AS r
 CROSS JOIN woke
  LEFT JOIN found AS f ON f.provider = r.key_provider AND f.event_id = r.key_event_id
 ORDER BY r.n;
