-- Rows in `processing` whose lease has expired, per provider (maintenance loop only).
SELECT provider, count(*) AS stuck
  FROM webhook_event
 WHERE state = 'processing' AND lease_until <= (julianday('now') - 2440587.5) * 86400.0
 GROUP BY provider;
