-- Operator repair: make a failed row, or a processing row whose lease has expired, failed with
-- its lease cleared, so that the next redelivery takes it over. A processing row whose lease is
-- still live is released only with :force (the operator knows its process is gone): releasing
-- a live attempt lets a redelivery reach the app while that attempt is still running.
-- The guard and the update are one statement: an attempt that renews or completes between an
-- operator's look and this statement is re-checked here (READ COMMITTED re-evaluates the WHERE
-- clause against the version a concurrent writer committed). A lease ending exactly now counts
-- as expired, and a processing row without a lease as expired, as in take_over.sql.
-- A stale attempt's later `complete` is refused (state <> processing, then attempt mismatch).
-- No row: no such event, a done row, a live lease without :force, or a queued event's row
-- (one with a queue entry: queue mode retries, dead-letters and re-drives it; never released).
UPDATE webhook_event AS e
   SET state = 'failed',
       lease_owner = NULL,
       lease_until = NULL,
       updated_at = clock_timestamp()
 WHERE provider = :provider::text AND event_id = :event_id::text
   AND state IN ('processing', 'failed')
   AND (state = 'failed' OR :force::boolean
        OR lease_until IS NULL OR lease_until <= clock_timestamp())
   AND NOT EXISTS (SELECT 1 FROM webhook_queue AS q
                    WHERE q.provider = e.provider AND q.event_id = e.event_id)
RETURNING attempt;
