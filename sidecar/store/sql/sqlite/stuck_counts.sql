-- Rows in `processing` whose lease has expired, per provider (maintenance loop only). Queued
-- events' rows (with a queue entry) are not counted: the next take picks a crashed worker's up.
SELECT provider, count(*) AS stuck
  FROM webhook_event
 WHERE state = 'processing' AND lease_until <= (julianday('now') - 2440587.5) * 86400.0
   AND NOT EXISTS (SELECT 1 FROM webhook_queue AS q
                    WHERE q.provider = webhook_event.provider
                      AND q.event_id = webhook_event.event_id)
 GROUP BY provider;
