-- :parent's bounded partitions that ended before now, oldest first, with how long ago (seconds),
-- and those a DETACH … CONCURRENTLY left pending: what retention may drop.
SELECT part::text AS name, lower_bound, upper_bound, pending,
       extract(epoch FROM clock_timestamp() - upper_bound)::float8 AS age_seconds
  FROM webhook_partitions(:parent::text::regclass)
 WHERE NOT is_default AND (pending OR upper_bound < clock_timestamp())
 ORDER BY upper_bound;
