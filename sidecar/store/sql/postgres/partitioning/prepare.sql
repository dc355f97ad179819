-- Add the switch's CHECK (:keycol < :bound) to :tbl, NOT VALID (functions.sql).
SELECT webhook_partition_prepare(:tbl::text, :keycol::text, :bound::timestamptz);
