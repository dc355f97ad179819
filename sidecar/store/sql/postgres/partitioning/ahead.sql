-- Make :parent's partitions :ahead intervals ahead; answers how many were made (functions.sql).
SELECT webhook_partitions_ahead(:parent::text::regclass, :keycol::text, :step_seconds::integer,
                                :ahead::integer);
