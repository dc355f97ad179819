-- Bind :nonce of :provider to :body_sha256 unless already bound; returns the binding only when
-- it bound it (no row: already bound, get_nonce.sql reads it).
INSERT INTO webhook_nonce (provider, nonce, body_sha256, received_at)
VALUES (:provider, :nonce, :body_sha256, (julianday('now') - 2440587.5) * 86400.0)
ON CONFLICT (provider, nonce) DO NOTHING
RETURNING {{binding}};
