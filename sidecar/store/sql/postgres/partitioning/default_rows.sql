-- Rows in :parent's DEFAULT partition (inserts past the last partition; should stay 0).
SELECT webhook_partition_default_rows(:parent::text::regclass)::integer;
