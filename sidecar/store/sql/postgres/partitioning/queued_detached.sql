-- Whether detached attempt table :part (an oid) holds the timeline of an event still waiting in
-- the queue (functions.sql, webhook_partition_queued).
SELECT webhook_partition_queued(:part::oid::regclass);
