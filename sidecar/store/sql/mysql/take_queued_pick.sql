-- take_queued_pick: up to :limit due entries, earliest due then in order of acceptance,
-- locked with their event rows; rows another taker holds are skipped, never waited for.
-- The held_back subquery reads without locks (a locking clause locks the outer tables only).
SELECT q.event_id
  FROM webhook_queue AS q
  JOIN webhook_event AS e ON e.provider = q.provider AND e.event_id = q.event_id
 WHERE q.provider = :provider
   AND q.due_at <= {{now}}
   AND e.state IN ('queued', 'processing')
   AND NOT {{held_back}}
 ORDER BY q.due_at, q.seq
 LIMIT :limit
   FOR UPDATE SKIP LOCKED;
