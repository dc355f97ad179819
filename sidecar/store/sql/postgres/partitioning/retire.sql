-- Drop detached partition :part of :parent, or attach it again if it holds work (functions.sql);
-- NULL: gone, or attached again, by another run.
SELECT webhook_partition_retire(:parent::text::regclass, to_regclass(:part::text),
                                :lower_bound::timestamptz, :upper_bound::timestamptz);
