-- Retention: delete up to :batch_size rows of :provider received more than :older_than seconds
-- ago, oldest first, never a processing row whose lease is live. One short statement; the cutoff
-- is computed once (an InitPlan), so the (provider, received_at) index bounds the scan. SKIP
-- LOCKED leaves rows being written right now for the next batch. Answers one row: the count.
--
-- Queue mode: a row whose queue entry is waiting or in flight is never deleted, however old
-- (the event is still to be delivered); a dead one is, and its entry with it (deleted here:
-- a partitioned store has no foreign key to cascade; an unpartitioned one's ON DELETE CASCADE
-- then finds nothing left). Such a row is 'queued' or 'processing': the state test is re-checked against a row
-- re-driven (requeue_dead.sql) after this statement's snapshot and before its lock, which the
-- NOT EXISTS alone, read in the snapshot, would miss. A 'processing' row with an expired lease
-- is a queued event's only if it has an entry, which it keeps while 'processing'.
--
-- An event's attempts (webhook_attempt) go with it, in this statement, by the keys deleted (no
-- foreign key: see 0006_attempts.sql). All the CTEs read one snapshot, so an attempt recorded
-- by a result write that committed after it would be left behind. Such a write is for a row
-- received longer ago than the retention and still in an attempt; the forwarder writes no
-- result past its lease (forwarder.py, LEASE_MARGIN), so that takes a retention shorter than
-- the lease (seconds to minutes, against the provider's retry window of hours or days).
WITH clock AS MATERIALIZED (
    SELECT clock_timestamp() AS now
), doomed AS (
    SELECT event_id
      FROM webhook_event
     WHERE provider = :provider::text
       AND received_at < (SELECT now - make_interval(secs => :older_than::float8) FROM clock)
       AND state <> 'queued'
       AND (state <> 'processing'
            OR lease_until IS NULL
            OR lease_until <= (SELECT now FROM clock))
       AND NOT EXISTS (SELECT 1 FROM webhook_queue AS q
                        WHERE q.provider = webhook_event.provider
                          AND q.event_id = webhook_event.event_id
                          AND q.due_at IS NOT NULL)
     ORDER BY received_at
     LIMIT :batch_size::integer
       FOR UPDATE OF webhook_event SKIP LOCKED
), deleted AS (
    DELETE FROM webhook_event
     WHERE provider = :provider::text
       AND event_id = ANY (ARRAY(SELECT event_id FROM doomed))
    RETURNING event_id
), entries_deleted AS (
    DELETE FROM webhook_queue
     WHERE provider = :provider::text
       AND event_id IN (SELECT event_id FROM deleted)
), attempts_deleted AS (
    DELETE FROM webhook_attempt
     WHERE provider = :provider::text
       AND event_id IN (SELECT event_id FROM deleted)
)
SELECT count(*)::integer AS deleted FROM deleted;
