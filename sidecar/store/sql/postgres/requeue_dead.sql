-- Re-drive dead events of :provider: each goes back to 'queued' and its entry is due now, with a
-- fresh budget (queued_at now starts max_age again; base_attempt = the row's attempt, so the
-- round's attempts count from zero; the attempt number itself goes on). :event_id names one
-- event, or NULL for up to :limit dead ones, oldest accepted first, optionally only those
-- received more than :older_than seconds ago (NULL: any age). The entry keeps its place in the
-- order of acceptance (seq), so a re-driven event goes before later events of its order key
-- that still wait; and its last_error, until its next try is settled. One autocommitted
-- statement; wakes the provider's workers in every process (pg_notify, at commit) when it
-- re-drove any. Answers the event ids re-driven, in order of acceptance.
--
-- Races: entries and rows another session holds (a purge deleting them, another requeue) are
-- skipped (SKIP LOCKED), never waited for: the operator runs it again. A row re-driven and
-- committed by another session after this statement's snapshot is re-checked in its new
-- version (READ COMMITTED): no longer dead, it is left.
WITH t AS MATERIALIZED (
    SELECT clock_timestamp() AS ts
), picked AS (
    SELECT q.provider, q.event_id, q.seq, e.attempt
      FROM webhook_queue AS q
      JOIN webhook_event AS e ON e.provider = q.provider AND e.event_id = q.event_id
     WHERE q.provider = :provider::text
       AND q.due_at IS NULL AND e.state = 'dead'
       AND (:event_id::text IS NULL OR q.event_id = :event_id::text)
       AND (:older_than::float8 IS NULL
            OR e.received_at < (SELECT ts FROM t) - make_interval(secs => :older_than::float8))
     ORDER BY q.seq
     LIMIT :limit::integer
       FOR NO KEY UPDATE OF q, e SKIP LOCKED
), entries AS (
    UPDATE webhook_queue AS q
       SET due_at = t.ts,
           queued_at = t.ts,
           base_attempt = picked.attempt,
           lease_owner = NULL
      FROM picked, t
     WHERE q.provider = picked.provider AND q.event_id = picked.event_id
    RETURNING q.provider, q.event_id
), events AS (
    UPDATE webhook_event AS e
       SET state = 'queued',
           updated_at = t.ts
      FROM picked, t
     WHERE e.provider = picked.provider AND e.event_id = picked.event_id
    RETURNING e.event_id
), woke AS (
    SELECT count(*) AS n
      FROM (SELECT DISTINCT provider FROM entries) AS woken,
           LATERAL pg_notify('webhook_sidecar_queue', woken.provider) AS notified
)
SELECT picked.event_id
  FROM picked
  JOIN events ON events.event_id = picked.event_id
  JOIN entries ON entries.event_id = picked.event_id
 WHERE (SELECT n FROM woke) >= 0
 ORDER BY picked.seq;
