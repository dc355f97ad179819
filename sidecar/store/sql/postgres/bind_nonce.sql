-- Bind nonce $2 of provider $1 to body hash $3 unless already bound; returns the bound hash.
-- No row: a competing insert committed after this statement's snapshot (read it anew).
WITH ins AS (
    INSERT INTO webhook_nonce (provider, nonce, body_sha256, received_at)
    VALUES ($1::text, $2::text, $3::bytea, clock_timestamp())
    ON CONFLICT (provider, nonce) DO NOTHING
    RETURNING body_sha256
)
SELECT body_sha256 FROM ins
UNION ALL
SELECT body_sha256 FROM webhook_nonce
 WHERE provider = $1::text AND nonce = $2::text AND NOT EXISTS (SELECT 1 FROM ins);
