-- Drop :index_name if an interrupted CREATE INDEX CONCURRENTLY left it invalid.
SELECT webhook_partition_drop_invalid(:index_name::text);
