-- Result writes that arrived while another was in flight (sidecar/store/coalesce.py), in one
-- autocommitted statement: one commit, one WAL flush for all of them. Each item is one call of
-- complete.sql, fenced the same way: written only if its row is still processing at the item's
-- :attempt. Every parameter is an array with one element per item, in item order (:state 'done'
-- or 'failed', :response_headers JSON text). Answers one row per item written, numbered by
-- `item` (1-based); an item without a row was superseded (another attempt took the event over,
-- an operator released it, or it was recorded already), exactly as complete.sql answers no row.
-- A queued event's row (one with a queue entry) is never written, as in complete.sql.
-- Two items for one row at different attempts: at most one matches the fence. At the same
-- attempt: the row is updated once, by one of them; the other answers no row, as the second of
-- two concurrent complete.sql would after the first committed.
--
-- A row another session holds is given up on after ~100 ms (row_lock_wait.fragment.sql) and
-- fails the whole statement (nothing is written); the adapter then runs the items one by one,
-- so that only the locked row's write answers RowLocked. Likewise a deadlock with another
-- session's batch (rows are locked in the order of the plan).
--
-- Each item written is recorded in the attempts timeline by the same statement, as in
-- complete.sql (the owner from `held`, the row as the snapshot had it: see there why that is
-- the owner of the version the fence passed on).
WITH item AS (
    SELECT *
      FROM unnest(:provider::text[], :event_id::text[], :attempt::integer[], :state::text[],
                  :outcome::text[], :response_status::integer[], :response_headers::text[],
                  :response_body::bytea[], :latency_ms::float8[])
           WITH ORDINALITY AS i(key_provider, key_event_id, item_attempt, item_state,
                                item_outcome, item_status, item_headers, item_body,
                                item_latency, n)
), written AS (
    UPDATE webhook_event AS e
       SET state = i.item_state,
           {{item_result}},
           updated_at = clock_timestamp()
      FROM item AS i, webhook_event AS held
     WHERE e.provider = i.key_provider AND e.event_id = i.key_event_id
       AND held.provider = e.provider AND held.event_id = e.event_id
       AND e.attempt = i.item_attempt AND e.state = 'processing'
       AND {{row_lock_wait}}
       AND NOT EXISTS (SELECT 1 FROM webhook_queue AS q
                        WHERE q.provider = e.provider AND q.event_id = e.event_id)
    RETURNING i.n AS item, e.provider, e.event_id, e.attempt, e.state, e.outcome,
              e.response_status, e.latency_ms, e.updated_at, held.lease_owner
), recorded AS (
    {{written_attempt}}
)
SELECT item, attempt FROM written;
