-- Switch the store to partitions in the caller's transaction (functions.sql).
SELECT webhook_partition_switch_all(:bound::timestamptz, :step_seconds::integer, :ahead::integer);
