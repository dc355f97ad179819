-- Take, step 1 (sqlite/transactions.py runs the steps inside BEGIN IMMEDIATE, so nothing
-- changes between them): up to :limit due entries of :provider, due first, then in order of
-- acceptance. Due: due_at has passed (a waiting entry whose time has come, or one in flight
-- whose lease has ended: its worker crashed or hung), and the row is 'queued' or 'processing'.
-- An entry with an order key is not due while another entry of the same key is waiting or in
-- flight and was accepted earlier (seq), or is in flight under a live lease: a dead event
-- re-driven (requeue_dead_entries.sql keeps its seq) waits for a later event of its key that
-- is being delivered. A dead entry holds nothing back. Each pick is then taken by
-- take_queued_entry.sql and take_queued_event.sql, in this order.
WITH t AS (
    SELECT (julianday('now') - 2440587.5) * 86400.0 AS ts
)
SELECT q.event_id
  FROM webhook_queue AS q
  JOIN webhook_event AS e ON e.provider = q.provider AND e.event_id = q.event_id
 WHERE q.provider = :provider
   AND q.due_at <= (SELECT ts FROM t)
   AND e.state IN ('queued', 'processing')
   AND NOT {{held_back}}
 ORDER BY q.due_at, q.seq
 LIMIT :limit;
