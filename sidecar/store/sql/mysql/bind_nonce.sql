-- bind_nonce: bind a nonce to a body's digest. ER_DUP_ENTRY (1062): bound already.
INSERT INTO webhook_nonce (provider, nonce, body_sha256, received_at)
VALUES (:provider, :nonce, :body_sha256, {{now}});
