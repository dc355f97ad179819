SELECT {{event_row}}
  FROM webhook_event
 WHERE provider = :provider AND event_id = :event_id;
