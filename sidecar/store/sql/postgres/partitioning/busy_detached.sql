-- Whether detached event table :part (an oid) holds an event still to be delivered; a queue
-- entry whose key is in :parent is a newer copy's and keeps nothing (functions.sql,
-- webhook_partition_busy).
SELECT webhook_partition_busy(:part::oid::regclass, :parent::text::regclass);
