-- The table of :parent's next partition, empty, if it starts within :ahead intervals; no row
-- when none is due (functions.sql).
SELECT part_name, lo, hi
  FROM webhook_partition_prepare_next(:parent::text::regclass, :keycol::text,
                                      :step_seconds::integer, :ahead::integer);
