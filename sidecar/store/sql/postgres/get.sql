-- One row with the database clock, and whether it has a queue entry.
SELECT {{event_row}}, {{in_queue}}
  FROM webhook_event AS e
 WHERE provider = :provider::text AND event_id = :event_id::text;
