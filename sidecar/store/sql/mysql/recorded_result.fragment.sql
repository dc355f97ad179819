-- The result columns an attempt's end writes (and the lease it ends).
outcome = :outcome,
response_status = :response_status,
response_headers = :response_headers,
response_body = :response_body,
latency_ms = :latency_ms,
lease_owner = NULL,
lease_until = NULL
