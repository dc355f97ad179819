-- Take, step 3, per entry picked by take_queued_pick.sql: the row goes to 'processing' with
-- attempt + 1 and a lease; the old result columns are cleared, as take_over.sql does. Answers
-- what the worker needs, with the database clock.
UPDATE webhook_event
   SET state = 'processing',
       attempt = attempt + 1,
       lease_owner = :owner,
       lease_until = (julianday('now') - 2440587.5) * 86400.0 + :lease_seconds,
       updated_at = (julianday('now') - 2440587.5) * 86400.0,
       outcome = NULL,
       response_status = NULL,
       response_headers = NULL,
       response_body = NULL,
       latency_ms = NULL
 WHERE provider = :provider AND event_id = :event_id
RETURNING event_id, attempt, payload_body, payload_request, updated_at AS now;
