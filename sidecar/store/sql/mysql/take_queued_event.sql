-- take_queued_event: its event row: a new attempt under the lease.
UPDATE webhook_event SET {{new_attempt}}
 WHERE provider = :provider AND event_id = :event_id;
