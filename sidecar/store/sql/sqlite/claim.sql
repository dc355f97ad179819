-- Insert a processing row at attempt 1 with a lease, or nothing if the key exists.
-- Runs inside BEGIN IMMEDIATE, followed by get.sql when nothing was inserted.
-- ('now' is the same value everywhere within one statement.) A row just claimed has no queue
-- entry.
-- A guarded claim (:guard_key not NULL) runs after bind_nonce.sql bound the guard in the same
-- transaction (sqlite/transactions.py), and inserts nothing unless :guard_key is bound to
-- :guard_digest: the database itself keeps a replayed body from creating a row.
INSERT INTO webhook_event (
    provider, event_id, received_at, body_sha256, state, attempt,
    lease_owner, lease_until, updated_at, payload_body, payload_request
)
SELECT :provider, :event_id, (julianday('now') - 2440587.5) * 86400.0, :body_sha256,
       'processing', 1,
       :owner, (julianday('now') - 2440587.5) * 86400.0 + :lease_seconds,
       (julianday('now') - 2440587.5) * 86400.0, :payload_body, :payload_request
 WHERE :guard_key IS NULL
    OR EXISTS (SELECT 1 FROM webhook_nonce
                WHERE provider = :provider AND nonce = :guard_key
                  AND body_sha256 = :guard_digest)
ON CONFLICT (provider, event_id) DO NOTHING
RETURNING {{event_row}}, false AS in_queue;
