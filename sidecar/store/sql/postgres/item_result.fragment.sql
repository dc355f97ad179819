-- The columns a batch item's result writes on its row (complete_batch.sql,
-- settle_queued_batch.sql): recorded_result.fragment.sql's, read from the item's unnested
-- arrays (item_outcome, …; :response_headers JSON text), the lease cleared. Unqualified: only
-- the item has these names. Spliced in where a query says {{item_result}}.
outcome = item_outcome,
response_status = item_status,
response_headers = item_headers::jsonb,
response_body = item_body,
latency_ms = item_latency,
lease_owner = NULL,
lease_until = NULL
