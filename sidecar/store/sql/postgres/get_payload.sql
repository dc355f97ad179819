-- The stored first request of one event (NULLs when the provider keeps no payloads).
-- $1 provider, $2 event_id.
SELECT payload_body, payload_request::text AS payload_request
  FROM webhook_event
 WHERE provider = $1::text AND event_id = $2::text;
