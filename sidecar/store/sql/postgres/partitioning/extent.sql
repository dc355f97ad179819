-- :parent's bounded partitions attached (a pending detach's left out) and how far past now
-- (seconds) the last one ends: <= 0 once new rows land in the DEFAULT partition (-infinity
-- with none). A read of the catalog only (functions.sql): no lock on the tables.
SELECT count(*)::integer AS partitions,
       coalesce(extract(epoch FROM max(upper_bound) - clock_timestamp())::float8,
                '-infinity') AS ahead_seconds
  FROM webhook_partitions(:parent::text::regclass)
 WHERE NOT is_default AND NOT pending;
