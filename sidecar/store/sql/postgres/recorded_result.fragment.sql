-- The columns an attempt's result writes on its row (complete.sql, settle_queued.sql;
-- sidecar/store/rows.py result_values): its outcome and response (:response_headers is JSON
-- text), the lease cleared; spliced in where a query says {{recorded_result}}.
outcome = :outcome::text,
response_status = :response_status::integer,
response_headers = :response_headers::text::jsonb,
response_body = :response_body::bytea,
latency_ms = :latency_ms::float8,
lease_owner = NULL,
lease_until = NULL
