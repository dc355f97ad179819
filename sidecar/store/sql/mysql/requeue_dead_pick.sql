-- requeue_dead_pick: dead entries to re-drive, in order of acceptance, locked with their rows.
SELECT q.event_id, q.seq, e.attempt
  FROM webhook_queue AS q
  JOIN webhook_event AS e ON e.provider = q.provider AND e.event_id = q.event_id
 WHERE q.provider = :provider
   AND q.due_at IS NULL AND e.state = 'dead'
   AND (:event_id IS NULL OR q.event_id = :event_id)
   AND (:older_than IS NULL OR e.received_at < {{now}} - :older_than)
 ORDER BY q.seq
 LIMIT :limit
   FOR UPDATE SKIP LOCKED;
