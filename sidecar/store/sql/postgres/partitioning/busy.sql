-- Whether event partition :part holds a live lease or a waiting queue entry (functions.sql).
SELECT webhook_partition_busy(:part::text::regclass);
