-- Bind :nonce of :provider to :body_sha256 unless already bound; returns the binding (the bound
-- hash and when it was first bound).
-- No row: a competing insert committed after this statement's snapshot (get_nonce.sql reads it).
WITH ins AS (
    INSERT INTO webhook_nonce (provider, nonce, body_sha256, received_at)
    VALUES (:provider::text, :nonce::text, :body_sha256::bytea, clock_timestamp())
    ON CONFLICT DO NOTHING
    RETURNING body_sha256, received_at
)
SELECT {{binding}} FROM ins
UNION ALL
SELECT {{binding}} FROM webhook_nonce
 WHERE provider = :provider::text AND nonce = :nonce::text AND NOT EXISTS (SELECT 1 FROM ins);
