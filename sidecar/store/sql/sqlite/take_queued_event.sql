-- Take, step 3, per entry picked by take_queued_pick.sql: the row goes to 'processing' with
-- attempt + 1 and a lease; the old result columns are cleared, as take_over.sql does. Answers
-- what the worker needs, with the database clock.
UPDATE webhook_event
   SET {{new_attempt}}
 WHERE provider = :provider AND event_id = :event_id
RETURNING event_id, attempt, payload_body, payload_request, updated_at AS now;
