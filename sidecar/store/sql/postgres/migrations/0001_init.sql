-- webhook-sidecar schema 1: one row per (provider, event_id).
--
-- Only immutable columns are indexed (the primary key and received_at), and the table keeps
-- 20% free space per page, so every state transition (claim -> done/failed, takeover, release)
-- is a HOT update that writes no index entry and needs no VACUUM to reclaim the old version.
-- Do not add an index on state, attempt, lease_* or updated_at (not even a partial one).

CREATE TABLE webhook_event (
    provider         text             NOT NULL,
    event_id         text             NOT NULL,
    received_at      timestamptz      NOT NULL,
    body_sha256      bytea            NOT NULL,
    state            text             NOT NULL
                     CONSTRAINT webhook_event_state_check
                     CHECK (state IN ('processing', 'done', 'failed')),
    attempt          integer          NOT NULL CHECK (attempt >= 1),
    lease_owner      text,
    lease_until      timestamptz,
    updated_at       timestamptz      NOT NULL,
    outcome          text,
    response_status  integer,
    response_headers jsonb,            -- [[name, value], ...] in the upstream's order
    response_body    bytea,
    latency_ms       double precision,
    CONSTRAINT webhook_event_pkey PRIMARY KEY (provider, event_id)
) WITH (fillfactor = 80);

-- Retention deletes the oldest rows of one provider in small batches.
CREATE INDEX webhook_event_received_at_idx ON webhook_event (provider, received_at);

COMMENT ON TABLE webhook_event IS
    'webhook-sidecar: one row per delivered event; state columns are deliberately unindexed';
