-- Whether :tbl is a plain table still (not yet switched to a partitioned one); no row: none.
SELECT relkind = 'r' AS plain FROM pg_class WHERE oid = to_regclass(:tbl::text);
