-- Retention: delete up to :batch_size rows of :provider received more than :older_than seconds
-- ago, oldest first, never a processing row whose lease is live. One short statement; the cutoff
-- is computed once (an InitPlan), so the (provider, received_at) index bounds the scan. SKIP
-- LOCKED leaves rows being written right now for the next batch. Answers one row: the count.
WITH clock AS MATERIALIZED (
    SELECT clock_timestamp() AS now
), doomed AS (
    SELECT event_id
      FROM webhook_event
     WHERE provider = :provider::text
       AND received_at < (SELECT now - make_interval(secs => :older_than::float8) FROM clock)
       AND (state <> 'processing'
            OR lease_until IS NULL
            OR lease_until <= (SELECT now FROM clock))
     ORDER BY received_at
     LIMIT :batch_size::integer
       FOR UPDATE OF webhook_event SKIP LOCKED
), deleted AS (
    DELETE FROM webhook_event
     WHERE provider = :provider::text
       AND event_id = ANY (ARRAY(SELECT event_id FROM doomed))
    RETURNING 1
)
SELECT count(*)::integer AS deleted FROM deleted;
