-- get_locked: one event row, locked for this transaction (a claim that found the key taken).
SELECT {{event_row}}, {{in_queue}}
  FROM webhook_event AS e
 WHERE e.provider = :provider AND e.event_id = :event_id
   LOCK IN SHARE MODE;
