-- webhook-sidecar embedded schema 5 (SQLite): the attempts timeline, one row per try of an event
-- to reach the app, written in the same transaction as the result on the event row
-- (sqlite/transactions.py). A table of its own, append-only: webhook_event gains no column and
-- no index. Not unique on (provider, event_id, attempt): in queue mode a try that did not reach
-- the app gives its attempt number back.
--
-- Retention deletes an event's attempts with it by ON DELETE CASCADE (the connection enforces
-- foreign keys): purge.sql stays one statement, and the check on insert is a lookup in the
-- event table's primary key inside this process, under the write lock the transaction holds.
CREATE TABLE webhook_attempt (
    provider        TEXT    NOT NULL,
    event_id        TEXT    NOT NULL,
    attempt         INTEGER NOT NULL,   -- what the app was told
    started_at      REAL    NOT NULL,   -- finished_at - latency_ms
    finished_at     REAL    NOT NULL,   -- when the result was written
    owner           TEXT,               -- the lease owner (process and call token)
    outcome         TEXT    NOT NULL,
    response_status INTEGER,            -- NULL: no answer
    latency_ms      REAL    NOT NULL,
    state           TEXT    NOT NULL,   -- what the row became: done, failed, queued, dead
    error           TEXT,               -- queue mode: the try's error (last_error)
    FOREIGN KEY (provider, event_id)
        REFERENCES webhook_event (provider, event_id) ON DELETE CASCADE
) STRICT;

-- One event's attempts in order (the inspector), and the cascade's lookup.
CREATE INDEX webhook_attempt_event_idx ON webhook_attempt (provider, event_id, finished_at);
