-- The columns a new attempt writes on its row (take_over.sql, take_queued_event.sql):
-- 'processing' at attempt + 1, leased to :owner for :lease_seconds, the previous attempt's result
-- cleared; spliced in where a query says {{new_attempt}}.
state = 'processing',
attempt = attempt + 1,
lease_owner = :owner,
lease_until = (julianday('now') - 2440587.5) * 86400.0 + :lease_seconds,
updated_at = (julianday('now') - 2440587.5) * 86400.0,
outcome = NULL,
response_status = NULL,
response_headers = NULL,
response_body = NULL,
latency_ms = NULL
