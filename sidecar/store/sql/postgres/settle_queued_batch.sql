-- Settles that arrived while another settle was in flight (sidecar/store/coalesce.py), in one
-- autocommitted statement: one commit, one WAL flush for all of them. Each item is one call of
-- settle_queued.sql, fenced the same way: written only if its entry's take counter is still the
-- item's :tries and its row still 'processing'. Every parameter is an array with one element per
-- item, in item order (:state 'done', 'queued' or 'dead'; :response_headers JSON text;
-- :retry_in seconds; :reached; :error NULL when none). Answers one row per item written,
-- numbered by `item` (1-based), with the row's attempt; an item without a row was superseded
-- (a newer take of its entry), exactly as settle_queued.sql answers no row.
-- Two items for one entry: at most one matches a take counter; at the same counter the first
-- in item order writes and the other answers no row, as the second of two concurrent
-- settle_queued.sql would after the first committed.
--
-- Races and locks as in settle_queued.sql: entries and rows are locked together (in key order)
-- and the fence is re-checked against their newest versions. A row another session holds is
-- given up on after ~100 ms (row_lock_wait.fragment.sql) and fails the whole statement (nothing
-- is written); the adapter then runs the items one by one, so that only the held row's settle
-- answers RowLocked. Likewise a deadlock.
--
-- Each item written is recorded in the attempts timeline by the same statement, as in
-- settle_queued.sql: the attempt number the app was told and the take's lease owner, both read
-- from the locked newest version (`locked`); the row's new state; the item's :error.
WITH t AS MATERIALIZED (
    SELECT clock_timestamp() AS ts
), item AS (
    SELECT *
      FROM unnest(:provider::text[], :event_id::text[], :tries::integer[], :state::text[],
                  :outcome::text[], :response_status::integer[], :response_headers::text[],
                  :response_body::bytea[], :latency_ms::float8[], :retry_in::float8[],
                  :reached::boolean[], :error::text[])
           WITH ORDINALITY AS i(key_provider, key_event_id, item_tries, item_state,
                                item_outcome, item_status, item_headers, item_body,
                                item_latency, item_retry_in, item_reached, item_error, n)
), locked AS (
    SELECT i.n AS item_n, q.provider, q.event_id, e.attempt AS told, e.lease_owner AS took
      FROM item AS i
      JOIN webhook_queue AS q ON q.provider = i.key_provider AND q.event_id = i.key_event_id
      JOIN webhook_event AS e ON e.provider = q.provider AND e.event_id = q.event_id
     WHERE q.tries = i.item_tries AND e.state = 'processing'
       AND {{row_lock_wait}}
     ORDER BY q.provider, q.event_id
       FOR NO KEY UPDATE OF q, e
), fenced AS (
    SELECT DISTINCT ON (l.provider, l.event_id) l.provider, l.event_id, l.told, l.took, i.*
      FROM locked AS l
      JOIN item AS i ON i.n = l.item_n
     ORDER BY l.provider, l.event_id, l.item_n
), settled AS (
    UPDATE webhook_event AS e
       SET state = f.item_state,
           attempt = CASE WHEN f.item_reached THEN e.attempt ELSE e.attempt - 1 END,
           {{item_result}},
           updated_at = t.ts
      FROM fenced AS f, t
     WHERE e.provider = f.provider AND e.event_id = f.event_id
    RETURNING f.n AS item, e.provider, e.event_id, e.attempt, e.state, e.outcome,
              e.response_status, e.latency_ms, e.updated_at, f.told, f.took, f.item_error
), recorded AS (
    INSERT INTO webhook_attempt (provider, event_id, attempt, started_at, finished_at, owner,
                                 outcome, response_status, latency_ms, state, error)
    SELECT provider, event_id, told,
           updated_at - make_interval(secs => latency_ms / 1000.0), updated_at, took,
           outcome, response_status, latency_ms, state, item_error
      FROM settled
), removed AS (
    DELETE FROM webhook_queue AS q
     USING fenced AS f
     WHERE f.item_state = 'done'
       AND q.provider = f.provider AND q.event_id = f.event_id
), kept AS (
    UPDATE webhook_queue AS q
       SET due_at = CASE WHEN f.item_state = 'queued'
                         THEN t.ts + make_interval(secs => coalesce(f.item_retry_in, 0))
                    END,
           last_error = f.item_error,
           lease_owner = NULL
      FROM fenced AS f, t
     WHERE f.item_state <> 'done'
       AND q.provider = f.provider AND q.event_id = f.event_id
)
SELECT item, attempt FROM settled;
