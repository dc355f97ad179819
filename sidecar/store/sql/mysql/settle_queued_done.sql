-- settle_queued_done: a delivered event's entry removed.
DELETE FROM webhook_queue
 WHERE provider = :provider AND event_id = :event_id AND tries = :tries;
