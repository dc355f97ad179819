-- webhook-sidecar embedded schema 1 (SQLite): one row per (provider, event_id).
-- Times are REAL seconds since the Unix epoch, from SQLite's clock.
-- Only immutable columns are indexed (the primary key and received_at).

CREATE TABLE webhook_event (
    provider         TEXT    NOT NULL,
    event_id         TEXT    NOT NULL,
    received_at      REAL    NOT NULL,
    body_sha256      BLOB    NOT NULL,
    state            TEXT    NOT NULL CHECK (state IN ('processing', 'done', 'failed')),
    attempt          INTEGER NOT NULL CHECK (attempt >= 1),
    lease_owner      TEXT,
    lease_until      REAL,
    updated_at       REAL    NOT NULL,
    outcome          TEXT,
    response_status  INTEGER,
    response_headers TEXT,   -- JSON: [[name, value], ...] in the upstream's order
    response_body    BLOB,
    latency_ms       REAL,
    PRIMARY KEY (provider, event_id)
) STRICT;

-- Retention deletes the oldest rows of one provider in small batches.
CREATE INDEX webhook_event_received_at_idx ON webhook_event (provider, received_at);
