-- Detach partition :part from :parent unless it holds work (functions.sql); NULL: it is no
-- partition of :parent any more (another run, or an operator, detached or dropped it).
SELECT webhook_partition_detach(:parent::text::regclass, to_regclass(:part::text));
