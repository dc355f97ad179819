-- :parent's bounded partitions attached (a pending detach's left out) and when the last one
-- ends, as Unix time: an absolute time, so that an alert comparing it with now fires as time
-- passes even when no run sets it again. 0 with none (every row lands in the DEFAULT
-- partition: "ended" at the epoch, so the alert fires). A read of the catalog only
-- (functions.sql): no lock on the tables. And the rows in its DEFAULT partition (inserts past
-- the last partition; should stay 0).
SELECT count(*)::integer AS partitions,
       coalesce(extract(epoch FROM max(upper_bound))::float8, 0) AS last_bound_epoch,
       webhook_partition_default_rows(:parent::text::regclass)::integer AS default_rows
  FROM webhook_partitions(:parent::text::regclass)
 WHERE NOT is_default AND NOT pending;
