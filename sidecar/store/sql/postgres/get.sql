-- One row with the database clock.
SELECT {{event_row}}
  FROM webhook_event
 WHERE provider = :provider::text AND event_id = :event_id::text;
