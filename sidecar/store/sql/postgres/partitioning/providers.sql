-- The providers with rows in partition :part (functions.sql).
SELECT webhook_partition_providers(:part::text::regclass);
