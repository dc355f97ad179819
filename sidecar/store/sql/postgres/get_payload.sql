-- The stored first request of one event (NULLs when the provider keeps no payloads).
SELECT payload_body, payload_request::text AS payload_request
  FROM webhook_event
 WHERE provider = :provider::text AND event_id = :event_id::text;
