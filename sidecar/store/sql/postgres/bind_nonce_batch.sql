-- Nonce binds that arrived while another was in flight (sidecar/store/coalesce.py), in one
-- autocommitted statement at READ COMMITTED: one commit, one WAL flush for all of them. Each item
-- is one call of bind_nonce.sql; every parameter is an array with one element per item, in item
-- order (arrival order). Answers one row per item that found its nonce, numbered by `item`
-- (1-based), with the binding (binding.fragment.sql: the hash the nonce is bound to, and when):
--
-- * the item's own :body_sha256, bound by this statement: the nonce was new, and this item is
--   the first of the batch to bind it.
-- * a sibling's hash: an earlier item of this batch (in item order) binds the same nonce and
--   bound its own hash (DISTINCT ON): two binds of one nonce in one batch behave like two
--   concurrent binds, the first binds, the second gets the first's hash back (the same hash if
--   the bodies match, a different one for a replayed nonce). The row comes from RETURNING: the
--   statement's snapshot cannot see what the statement itself inserted.
-- * the hash bound before this statement's snapshot (a redelivery if it is the item's own, a
--   replay if not).
-- * no row for the item: a competitor in another session bound the nonce and committed after
--   this statement's snapshot (the INSERT waited for it, then did nothing), exactly as in
--   bind_nonce.sql. The caller reads the hash with a new statement (get_nonce.sql); if there is
--   none, the nonce was purged in between, and the caller binds it again.
--
-- Nonces are inserted in (provider, nonce) order, in every batch: two batches inserting the
-- same nonces wait for each other in one direction only and cannot deadlock. (Should one be
-- chosen as a deadlock victim anyway, the adapter runs its items one by one.)
-- The NOT EXISTS keeps a row this statement's snapshot still shows, but that was deleted and
-- inserted anew by this very statement (a purge committed in between), from answering twice.
WITH t AS (
    SELECT clock_timestamp() AS ts
), item AS (
    SELECT *
      FROM unnest(:provider::text[], :nonce::text[], :body_sha256::bytea[])
           WITH ORDINALITY AS i(key_provider, key_nonce, item_sha256, n)
), ins AS (
    INSERT INTO webhook_nonce AS w (provider, nonce, body_sha256, received_at)
    SELECT DISTINCT ON (i.key_provider, i.key_nonce)
           i.key_provider, i.key_nonce, i.item_sha256, t.ts
      FROM item AS i CROSS JOIN t
     ORDER BY i.key_provider, i.key_nonce, i.n
    ON CONFLICT DO NOTHING
    RETURNING w.provider, w.nonce, w.body_sha256, w.received_at
), found AS (
    SELECT ins.provider, ins.nonce, ins.body_sha256, ins.received_at
      FROM ins
    UNION ALL
    SELECT w.provider, w.nonce, w.body_sha256, w.received_at
      FROM webhook_nonce AS w
     WHERE (w.provider, w.nonce) IN (SELECT key_provider, key_nonce FROM item)
       AND NOT EXISTS (SELECT 1 FROM ins
                        WHERE ins.provider = w.provider AND ins.nonce = w.nonce)
)
SELECT i.n AS item, {{binding}}
  FROM item AS i
  JOIN found AS f ON f.provider = i.key_provider AND f.nonce = i.key_nonce;
