-- webhook-sidecar embedded schema 4 (SQLite): queue mode (`providers.<key>.mode: queue`).
--
-- A queued event is an ordinary webhook_event row (state 'queued', then 'processing' while a
-- delivery worker forwards it, then 'done' or 'dead'; attempt 0 until its first take) plus one
-- row in webhook_queue: its due time, its place in the order of acceptance, its order key and
-- the take counter that fences workers. The queue's mutable columns are indexed, so they live
-- in their own small table, and webhook_event keeps only immutable columns indexed.

-- The event table admits the two new states, and attempt 0. Its CHECKs are written inline in a
-- STRICT table, which SQLite cannot alter: the table is rebuilt (new table, copy, drop, rename,
-- index again) with the same columns in the same order, inside this migration's transaction.
-- Nothing references webhook_event yet (webhook_queue is created below), so the DROP, which
-- deletes the rows first where foreign keys are enforced, has nothing to cascade to. A later
-- migration that rebuilds webhook_event again must keep its queue entries: run the rebuild
-- with `PRAGMA defer_foreign_keys = ON` and copy the rows back under the same keys.
CREATE TABLE webhook_event_new (
    provider         TEXT    NOT NULL,
    event_id         TEXT    NOT NULL,
    received_at      REAL    NOT NULL,
    body_sha256      BLOB    NOT NULL,
    state            TEXT    NOT NULL
                     CHECK (state IN ('processing', 'done', 'failed', 'queued', 'dead')),
    attempt          INTEGER NOT NULL CHECK (attempt >= 0),
    lease_owner      TEXT,
    lease_until      REAL,
    updated_at       REAL    NOT NULL,
    outcome          TEXT,
    response_status  INTEGER,
    response_headers TEXT,   -- JSON: [[name, value], ...] in the upstream's order
    response_body    BLOB,
    latency_ms       REAL,
    payload_body     BLOB,
    payload_request  TEXT,   -- JSON {method, path, headers}
    PRIMARY KEY (provider, event_id)
) STRICT;

INSERT INTO webhook_event_new (
    provider, event_id, received_at, body_sha256, state, attempt, lease_owner, lease_until,
    updated_at, outcome, response_status, response_headers, response_body, latency_ms,
    payload_body, payload_request
)
SELECT provider, event_id, received_at, body_sha256, state, attempt, lease_owner, lease_until,
       updated_at, outcome, response_status, response_headers, response_body, latency_ms,
       payload_body, payload_request
  FROM webhook_event;

DROP TABLE webhook_event;
ALTER TABLE webhook_event_new RENAME TO webhook_event;

-- Retention deletes the oldest rows of one provider in small batches.
CREATE INDEX webhook_event_received_at_idx ON webhook_event (provider, received_at);

CREATE TABLE webhook_queue (
    -- The order of acceptance: the rowid, which SQLite assigns as one more than the largest in
    -- the table, so a new entry comes after every entry there (all enqueues write under the one
    -- write lock, so acceptance and commit happen in this order too).
    seq          INTEGER PRIMARY KEY,
    provider     TEXT    NOT NULL,
    event_id     TEXT    NOT NULL,
    -- When the entry is next due: now when queued, the end of the lease while a worker holds
    -- it, the retry time after a failed try. NULL: dead (kept for inspection and re-drive).
    due_at       REAL,
    queued_at    REAL    NOT NULL,   -- queued or last re-driven: starts max_age
    base_attempt INTEGER NOT NULL CHECK (base_attempt >= 0),  -- attempt when queued
    tries        INTEGER NOT NULL DEFAULT 0 CHECK (tries >= 0),  -- takes: the fence
    order_key    TEXT,
    last_error   TEXT,
    lease_owner  TEXT,   -- the take holding the entry, NULL once that try is settled
    UNIQUE (provider, event_id),
    FOREIGN KEY (provider, event_id)
        REFERENCES webhook_event (provider, event_id) ON DELETE CASCADE
) STRICT;

-- Takes: a provider's due entries, earliest first, then in order of acceptance.
CREATE INDEX webhook_queue_due_idx ON webhook_queue (provider, due_at, seq);
-- The ordering check: earlier entries of the same order key.
CREATE INDEX webhook_queue_order_idx ON webhook_queue (provider, order_key, seq)
    WHERE order_key IS NOT NULL;
