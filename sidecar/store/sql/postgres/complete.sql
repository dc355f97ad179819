-- Record attempt $3's result, fenced: only if the row is still processing at that attempt.
-- $1 provider, $2 event_id, $3 attempt, $4 state ('done' | 'failed'), $5 outcome,
-- $6 response status, $7 response headers (JSON text), $8 response body, $9 latency ms.
UPDATE webhook_event
   SET state = $4::text,
       outcome = $5::text,
       response_status = $6::integer,
       response_headers = $7::text::jsonb,
       response_body = $8::bytea,
       latency_ms = $9::float8,
       lease_owner = NULL,
       lease_until = NULL,
       updated_at = clock_timestamp()
 WHERE provider = $1::text AND event_id = $2::text
   AND attempt = $3::integer AND state = 'processing'
RETURNING attempt;
