-- One retention run at a time across the proxies sharing the store (maintenance runs in every
-- process): a session-level lock, released with the run's own connection. False: another holds it.
SELECT pg_try_advisory_lock(hashtextextended('webhook_partition_round', 0));
