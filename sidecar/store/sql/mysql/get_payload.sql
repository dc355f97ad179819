-- get_payload: the stored request of an event.
SELECT payload_body, payload_request
  FROM webhook_event
 WHERE provider = :provider AND event_id = :event_id;
