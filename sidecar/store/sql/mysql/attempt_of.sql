-- attempt_of: the row's attempt, read by the transaction that just wrote it.
SELECT attempt FROM webhook_event WHERE provider = :provider AND event_id = :event_id;
