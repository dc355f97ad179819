-- Whether the event table holds any event.
SELECT EXISTS (SELECT 1 FROM webhook_event);
