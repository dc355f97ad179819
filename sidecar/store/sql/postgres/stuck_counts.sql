-- Rows in `processing` whose lease has expired (a crashed or abandoned attempt), per provider.
-- A sequential scan by design: state columns stay unindexed so transitions are HOT updates.
-- Run by the maintenance loop, not per request. Queued events' rows (with a queue entry) are
-- not counted: a crashed delivery worker's expired lease is picked up by the next take.
SELECT provider, count(*)::bigint AS stuck
  FROM webhook_event AS e
 WHERE state = 'processing' AND lease_until <= clock_timestamp()
   AND NOT EXISTS (SELECT 1 FROM webhook_queue AS q
                    WHERE q.provider = e.provider AND q.event_id = e.event_id)
 GROUP BY provider;
