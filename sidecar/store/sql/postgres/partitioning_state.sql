-- Whether the event table is partitioned, and the span of its newest bounded partition in
-- seconds (NULL when unpartitioned): what the proxy compares with store.partitioning at
-- start-up. Read from the catalog, so it prepares on both shapes of the store.
WITH bounds AS (
    SELECT regexp_match(pg_get_expr(k.relpartbound, k.oid),
                        '^FOR VALUES FROM \(''(.*)''\) TO \(''(.*)''\)$') AS m
      FROM pg_inherits AS i
      JOIN pg_class AS k ON k.oid = i.inhrelid
     WHERE i.inhparent = to_regclass('webhook_event')
)
SELECT coalesce((SELECT relkind = 'p' FROM pg_class
                  WHERE oid = to_regclass('webhook_event')), false) AS partitioned,
       (SELECT extract(epoch FROM m[2]::timestamptz - m[1]::timestamptz)::float8
          FROM bounds
         WHERE m IS NOT NULL
         ORDER BY m[2]::timestamptz DESC
         LIMIT 1) AS interval_seconds;
