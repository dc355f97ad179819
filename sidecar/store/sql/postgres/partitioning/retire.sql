-- Drop detached partition :part of :parent, or attach it again if it holds work (functions.sql).
SELECT webhook_partition_retire(:parent::text::regclass, :part::text::regclass,
                                :lower_bound::timestamptz, :upper_bound::timestamptz);
