-- One retention step at a time across the proxies sharing the store (maintenance runs in every
-- process), taken first in each detach transaction: a transaction-level lock, so nothing is
-- left held on a pooled server connection (pgbouncer in transaction mode). False: another
-- process is in a step; this one leaves the round to it.
SELECT pg_try_advisory_xact_lock(hashtextextended('webhook_partition_round', 0));
