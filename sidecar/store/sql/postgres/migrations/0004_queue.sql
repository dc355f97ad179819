-- webhook-sidecar schema 4: queue mode (`providers.<key>.mode: queue`).
--
-- A queued event is an ordinary webhook_event row (state 'queued', then 'processing' while a
-- delivery worker forwards it, then 'done' or 'dead'; attempt 0 until its first take) plus one
-- row in webhook_queue: its due time, its place in the order of acceptance, its order key and
-- the take counter that fences workers. The queue's mutable columns are indexed (takes find due
-- entries by them), so they live in their own small table: webhook_event keeps only immutable
-- columns indexed, and its state transitions stay HOT updates (see 0001_init.sql). The queue
-- holds only entries waiting, in flight or dead: an entry is deleted when its event is done.

-- Give up rather than queue: while this ALTER waits for its lock (behind a long transaction,
-- a dump, a report on the table), every proxy statement on the table would queue behind it.
-- Past 10 s the migration fails and says so; run it again when the table is quiet.
SET LOCAL lock_timeout = '10s';

-- The event table admits the two new states, and attempt 0 (queued, never tried yet).
-- NOT VALID: no scan of the table here, so the ACCESS EXCLUSIVE lock these ALTERs take lasts
-- only as long as the catalog change (this whole file is one transaction). The new checks admit
-- every row the old, validated ones did, so existing rows pass; new and updated rows are
-- checked at once, as for any constraint. 0005_queue_checks.sql validates them in a transaction
-- of its own, under a lock that lets reads and writes go on.
ALTER TABLE webhook_event
    DROP CONSTRAINT webhook_event_state_check,
    ADD CONSTRAINT webhook_event_state_check
        CHECK (state IN ('processing', 'done', 'failed', 'queued', 'dead')) NOT VALID,
    DROP CONSTRAINT webhook_event_attempt_check,
    ADD CONSTRAINT webhook_event_attempt_check CHECK (attempt >= 0) NOT VALID;

CREATE TABLE webhook_queue (
    provider     text        NOT NULL,
    event_id     text        NOT NULL,
    -- The order of acceptance: a sequence value drawn by the enqueue's INSERT. Two enqueues in
    -- flight together may commit in the other order; take_queued.sql keeps one order key to one
    -- delivery at a time all the same.
    seq          bigint      NOT NULL GENERATED ALWAYS AS IDENTITY,
    -- When the entry is next due: now when queued, the end of the lease while a worker holds
    -- it, the retry time after a failed try. NULL: dead (kept for inspection and re-drive).
    due_at       timestamptz,
    queued_at    timestamptz NOT NULL,   -- queued or last re-driven: starts max_age
    base_attempt integer     NOT NULL CHECK (base_attempt >= 0),  -- attempt when queued
    tries        integer     NOT NULL DEFAULT 0 CHECK (tries >= 0),  -- takes: the fence
    order_key    text,
    last_error   text,
    -- The take holding the entry (take_queued's call token), NULL once that try is settled.
    -- Before the first take: the enqueue call's token, by which a repeated enqueue recognises
    -- its own insert (enqueue_landed.sql).
    lease_owner  text,
    CONSTRAINT webhook_queue_pkey PRIMARY KEY (provider, event_id),
    CONSTRAINT webhook_queue_event_fkey FOREIGN KEY (provider, event_id)
        REFERENCES webhook_event (provider, event_id) ON DELETE CASCADE
);

-- Takes: a provider's due entries, earliest first, then in order of acceptance.
CREATE INDEX webhook_queue_due_idx ON webhook_queue (provider, due_at, seq);
-- The ordering check: earlier entries of the same order key.
CREATE INDEX webhook_queue_order_idx ON webhook_queue (provider, order_key, seq)
    WHERE order_key IS NOT NULL;

COMMENT ON TABLE webhook_queue IS
    'webhook-sidecar: queue mode entries (waiting, in flight or dead) of webhook_event rows';
