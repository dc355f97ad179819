-- webhook-sidecar schema 2: the first delivery's request, kept only for providers with
-- `store_payload: true`, so that an operator can re-drive a failed event to the app.
-- Written once by the claim's INSERT and never updated; deleted with the row by retention.
ALTER TABLE webhook_event
    ADD COLUMN payload_body    bytea,
    ADD COLUMN payload_request jsonb;   -- {"method": …, "path": …, "headers": [[name, value], …]}
