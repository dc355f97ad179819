-- A new attempt: processing under a fresh lease, the old result cleared.
state = 'processing',
attempt = attempt + 1,
lease_owner = :owner,
lease_until = ROUND({{now}} + :lease_seconds, 6),
updated_at = {{now}},
outcome = NULL,
response_status = NULL,
response_headers = NULL,
response_body = NULL,
latency_ms = NULL
