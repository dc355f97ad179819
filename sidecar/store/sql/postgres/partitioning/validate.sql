-- Validate the switch's CHECK on :tbl: a scan that lets writers go on (functions.sql).
SELECT webhook_partition_validate(:tbl::text);
