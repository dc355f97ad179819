-- webhook-sidecar schema 3: signature nonces bound to the body first seen with them, for
-- providers whose signature does not cover the body (Mailgun signs a timestamp and a token):
-- the same signed token with another body is a replay. Rows are immutable; retention deletes
-- them with the provider's events.
CREATE TABLE webhook_nonce (
    provider     text        NOT NULL,
    nonce        text        NOT NULL,
    body_sha256  bytea       NOT NULL,
    received_at  timestamptz NOT NULL,
    CONSTRAINT webhook_nonce_pkey PRIMARY KEY (provider, nonce)
);
CREATE INDEX webhook_nonce_received_at_idx ON webhook_nonce (provider, received_at);
