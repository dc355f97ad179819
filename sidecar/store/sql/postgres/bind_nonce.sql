-- Bind :nonce of :provider to :body_sha256 unless already bound; returns the bound hash.
-- No row: a competing insert committed after this statement's snapshot (get_nonce.sql reads it).
WITH ins AS (
    INSERT INTO webhook_nonce (provider, nonce, body_sha256, received_at)
    VALUES (:provider::text, :nonce::text, :body_sha256::bytea, clock_timestamp())
    ON CONFLICT (provider, nonce) DO NOTHING
    RETURNING body_sha256
)
SELECT body_sha256 FROM ins
UNION ALL
SELECT body_sha256 FROM webhook_nonce
 WHERE provider = :provider::text AND nonce = :nonce::text AND NOT EXISTS (SELECT 1 FROM ins);
