-- webhook-sidecar embedded schema 3: signature nonces bound to the first body seen with them
-- (providers whose signature does not cover the body, e.g. Mailgun).
CREATE TABLE webhook_nonce (
    provider     TEXT NOT NULL,
    nonce        TEXT NOT NULL,
    body_sha256  BLOB NOT NULL,
    received_at  REAL NOT NULL,
    PRIMARY KEY (provider, nonce)
) STRICT;
CREATE INDEX webhook_nonce_received_at_idx ON webhook_nonce (provider, received_at);
