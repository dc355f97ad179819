-- Take up to :limit due entries of :provider for delivery, leased to :owner (unique to the call)
-- for :lease_seconds, in one autocommitted statement at READ COMMITTED. Answers one row per
-- entry taken, due first, then in order of acceptance, each with what the worker needs: the
-- row's new attempt, the entry's new take count (the fence its settle names), the attempts of
-- this round (since queued or re-driven), when the round started, the database clock, and the
-- stored request. No row: nothing is due (or everything due is held by others).
--
-- Due: the entry's due_at has passed. That is a waiting entry whose time has come, or one in
-- flight whose lease has ended (its worker crashed or hung: the entry's due_at is the lease's
-- end), which is taken again with a new take count, so that the old worker's settle is refused.
-- Only rows in 'queued' or 'processing' are taken (an entry always has one of these while it is
-- not dead; the check keeps a row in any other state out for good).
--
-- Ordering: an entry with an order key is not due while another entry of the same key is
-- waiting or in flight and was accepted earlier (seq), or is in flight under a live lease.
-- The second arm covers an earlier entry that becomes due while a later one of its key is
-- being delivered: a dead event re-driven (requeue_dead.sql keeps its seq), or two enqueues
-- that committed in the other order than their seq (the later seq taken before the earlier one
-- was visible). The earlier one then waits for the later one's try to be settled, so that one
-- key still reaches the app one event at a time.
-- A dead entry (due_at NULL) holds nothing back.
--
-- Races: concurrent takers (any process) lock the entry and its event row with SKIP LOCKED, so
-- each entry is taken by one of them, and none waits for another; an entry taken and committed
-- by another taker after this statement's snapshot is locked in its new version and re-checked
-- (READ COMMITTED): its due_at is now the lease's end, so it is left. The ordering check reads
-- this statement's snapshot: at worst an entry is held back until the next take.
-- The old result columns are cleared, as take_over.sql does for a new attempt.
WITH t AS MATERIALIZED (
    SELECT clock_timestamp() AS ts
), picked AS (
    SELECT q.provider, q.event_id, q.due_at, q.seq
      FROM webhook_queue AS q
      JOIN webhook_event AS e ON e.provider = q.provider AND e.event_id = q.event_id
     WHERE q.provider = :provider::text
       AND q.due_at <= (SELECT ts FROM t)
       AND e.state IN ('queued', 'processing')
       AND NOT {{held_back}}
     ORDER BY q.due_at, q.seq
     LIMIT :limit::integer
       FOR NO KEY UPDATE OF q, e SKIP LOCKED
), entries AS (
    UPDATE webhook_queue AS q
       SET tries = q.tries + 1,
           due_at = t.ts + make_interval(secs => :lease_seconds::float8),
           lease_owner = :owner::text
      FROM picked, t
     WHERE q.provider = picked.provider AND q.event_id = picked.event_id
    RETURNING q.event_id, q.tries, q.base_attempt, q.queued_at
), events AS (
    UPDATE webhook_event AS e
       SET state = 'processing',
           attempt = e.attempt + 1,
           lease_owner = :owner::text,
           lease_until = t.ts + make_interval(secs => :lease_seconds::float8),
           updated_at = t.ts,
           outcome = NULL,
           response_status = NULL,
           response_headers = NULL,
           response_body = NULL,
           latency_ms = NULL
      FROM picked, t
     WHERE e.provider = picked.provider AND e.event_id = picked.event_id
    RETURNING e.event_id, e.attempt, e.payload_body, e.payload_request
)
SELECT events.event_id, events.attempt, entries.tries,
       events.attempt - entries.base_attempt AS round_attempts,
       extract(epoch FROM entries.queued_at)::float8 AS queued_at,
       extract(epoch FROM t.ts)::float8 AS now,
       events.payload_body, events.payload_request::text AS payload_request
  FROM picked
  JOIN entries ON entries.event_id = picked.event_id
  JOIN events ON events.event_id = picked.event_id
 CROSS JOIN t
 ORDER BY picked.due_at, picked.seq;
