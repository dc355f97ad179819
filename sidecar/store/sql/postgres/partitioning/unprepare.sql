-- Drop the switch's CHECK from :tbl when the switch did not happen (functions.sql).
SELECT webhook_partition_unprepare(:tbl::text);
