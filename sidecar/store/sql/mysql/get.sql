-- get: one event row, and whether it has a queue entry.
SELECT {{event_row}}, {{in_queue}}
  FROM webhook_event AS e
 WHERE e.provider = :provider AND e.event_id = :event_id;
