-- Bind :nonce of :provider to :body_sha256 unless already bound (get_nonce.sql reads it back).
INSERT INTO webhook_nonce (provider, nonce, body_sha256, received_at)
VALUES (:provider, :nonce, :body_sha256, (julianday('now') - 2440587.5) * 86400.0)
ON CONFLICT (provider, nonce) DO NOTHING;
