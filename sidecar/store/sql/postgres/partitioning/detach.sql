-- Detach partition :part from :parent unless it holds a waiting queue entry (functions.sql).
SELECT webhook_partition_detach(:parent::text::regclass, :part::text::regclass);
