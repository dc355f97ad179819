-- webhook-sidecar embedded schema 2: the first delivery's request, kept only for providers with
-- `store_payload: true`, for re-driving a failed event. Written once by the claim.
ALTER TABLE webhook_event ADD COLUMN payload_body BLOB;
ALTER TABLE webhook_event ADD COLUMN payload_request TEXT;  -- JSON {method, path, headers}
