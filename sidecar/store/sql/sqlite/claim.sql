-- Insert a processing row at attempt 1 with a lease, or nothing if the key exists.
-- Runs inside BEGIN IMMEDIATE, followed by get.sql when nothing was inserted.
-- ('now' is the same value everywhere within one statement.) A row just claimed has no queue
-- entry.
INSERT INTO webhook_event (
    provider, event_id, received_at, body_sha256, state, attempt,
    lease_owner, lease_until, updated_at, payload_body, payload_request
) VALUES (
    :provider, :event_id, (julianday('now') - 2440587.5) * 86400.0, :body_sha256,
    'processing', 1,
    :owner, (julianday('now') - 2440587.5) * 86400.0 + :lease_seconds,
    (julianday('now') - 2440587.5) * 86400.0, :payload_body, :payload_request
)
ON CONFLICT (provider, event_id) DO NOTHING
RETURNING {{event_row}}, false AS in_queue;
