-- webhook-sidecar schema 6: the attempts timeline, one row per try of an event to reach the app.
--
-- webhook_event keeps only an event's last result; the inspector shows every try. Written by the
-- very statement that writes a result on the event row (complete.sql, complete_batch.sql,
-- settle_queued.sql: a data-modifying WITH), so the timeline and the row never disagree and no
-- round trip is added. A table of its own, append-only: webhook_event gains no column and no
-- index (its state transitions stay HOT updates, see 0001_init.sql), and an attempt row is
-- written once and never updated.
--
-- No foreign key to webhook_event: its check would cost every attempt insert a lookup of the
-- event row and a KEY SHARE lock on the version the same statement has just written (a WAL
-- record each), on the delivery path. Retention deletes an event's attempts in its own
-- statement instead (purge.sql), set-wise by this table's index.
--
-- Not unique on (provider, event_id, attempt): in queue mode a try that did not reach the app
-- gives its attempt number back, so the next try has the same number.

-- Nothing here touches a table the proxies use; should the CREATE wait for a lock all the same,
-- give up after 10 s rather than queue other sessions behind it (as 0004_queue.sql).
SET LOCAL lock_timeout = '10s';

CREATE TABLE webhook_attempt (
    provider        text             NOT NULL,
    event_id        text             NOT NULL,
    attempt         integer          NOT NULL,   -- what the app was told
    started_at      timestamptz      NOT NULL,   -- finished_at - latency_ms
    finished_at     timestamptz      NOT NULL,   -- when the result was written
    owner           text,                        -- the lease owner (process and call token)
    outcome         text             NOT NULL,   -- response, timeout, connect_error, disconnected
    response_status integer,                     -- NULL: no answer
    latency_ms      double precision NOT NULL,
    state           text             NOT NULL,   -- what the row became: done, failed, queued, dead
    error           text                         -- queue mode: the try's error (last_error)
);

-- One event's attempts in order (the inspector), and retention's delete of them.
CREATE INDEX webhook_attempt_event_idx ON webhook_attempt (provider, event_id, finished_at);

COMMENT ON TABLE webhook_attempt IS
    'webhook-sidecar: every recorded try of a webhook_event row, written with its result';
