-- take_queued_read: what the worker needs of one entry taken (read by the taking transaction).
SELECT e.event_id, e.attempt, q.tries, e.attempt - q.base_attempt AS round_attempts,
       q.queued_at, e.updated_at AS now, e.payload_body, e.payload_request
  FROM webhook_queue AS q
  JOIN webhook_event AS e ON e.provider = q.provider AND e.event_id = q.event_id
 WHERE q.provider = :provider AND q.event_id = :event_id;
