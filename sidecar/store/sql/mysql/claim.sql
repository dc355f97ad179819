-- claim: insert the event row, processing at attempt 1 under a lease (guarded: only if the
-- replay guard is bound to this digest). 1 row: won; 0 rows: the guard refused; ER_DUP_ENTRY
-- (1062): the key exists (read it with get_locked.sql).
INSERT INTO webhook_event (
    provider, event_id, received_at, body_sha256, state, attempt,
    lease_owner, lease_until, updated_at, payload_body, payload_request
)
SELECT :provider, :event_id, {{now}}, :body_sha256, 'processing', 1,
       :owner, ROUND({{now}} + :lease_seconds, 6), {{now}}, :payload_body, :payload_request
  FROM DUAL
 WHERE :guard_key IS NULL
    OR EXISTS (SELECT 1 FROM webhook_nonce
                WHERE provider = :provider AND nonce = :guard_key
                  AND body_sha256 = :guard_digest);
