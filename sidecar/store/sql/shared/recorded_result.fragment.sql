-- The columns an attempt's result writes on its row (complete.sql, settle_queued_event.sql;
-- sidecar/store/rows.py result_values): its outcome and response, the lease cleared. MySQL and
-- SQLite splice this in where a query says {{recorded_result}}; PostgreSQL has its own.
outcome = :outcome,
response_status = :response_status,
response_headers = :response_headers,
response_body = :response_body,
latency_ms = :latency_ms,
lease_owner = NULL,
lease_until = NULL
