-- Make the next partition of :parent if it starts within :ahead intervals (functions.sql).
SELECT webhook_partition_next(:parent::text::regclass, :keycol::text, :step_seconds::integer,
                              :ahead::integer);
