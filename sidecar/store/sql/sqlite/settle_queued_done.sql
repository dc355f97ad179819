-- Settle, step 2 for 'done', after settle_queued_event.sql wrote the row: the entry goes.
DELETE FROM webhook_queue
 WHERE provider = :provider AND event_id = :event_id AND tries = :tries;
