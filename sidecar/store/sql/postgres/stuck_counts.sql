-- Rows in `processing` whose lease has expired (a crashed or abandoned attempt), per provider.
-- A sequential scan by design: state columns stay unindexed so transitions are HOT updates.
-- Run by the maintenance loop, not per request.
SELECT provider, count(*)::bigint AS stuck
  FROM webhook_event
 WHERE state = 'processing' AND lease_until <= clock_timestamp()
 GROUP BY provider;
