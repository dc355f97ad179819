-- settle_lock: the entry and row a settle fences on (the take's try count), locked.
SELECT e.attempt, e.lease_owner
  FROM webhook_queue AS q
  JOIN webhook_event AS e ON e.provider = q.provider AND e.event_id = q.event_id
 WHERE q.provider = :provider AND q.event_id = :event_id
   AND q.tries = :tries AND e.state = 'processing'
   FOR UPDATE;
