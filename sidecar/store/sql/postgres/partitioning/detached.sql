-- Partitions a maintenance round detached and died before dropping (functions.sql,
-- webhook_partitions_detached), with their parent and bounds: retention drops them first.
SELECT part::text AS name, parent::text AS parent, lower_bound, upper_bound
  FROM webhook_partitions_detached();
