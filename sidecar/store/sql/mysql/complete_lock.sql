-- complete_lock: the row a result write fences on, locked, with the lease owner it ends.
SELECT e.attempt, e.lease_owner
  FROM webhook_event AS e
 WHERE e.provider = :provider AND e.event_id = :event_id
   AND e.attempt = :attempt AND e.state = 'processing'
   AND {{not_queued}}
   FOR UPDATE;
