-- webhook-sidecar: delivery limits shared by every process and replica (delivery.rate,
-- delivery.burst, delivery.concurrency). Two small tables of their own, a row per provider and
-- a row per concurrency slot: webhook_event gains nothing.
--
-- webhook_rate: one token bucket per provider. take_tokens.sql refills it from the database
-- clock (tokens + seconds since refilled_at × rate, at most the burst) and takes what it may in
-- the same statement; `taken` is what the last take granted (its RETURNING reads it).
-- webhook_permit: one row per slot of a provider's concurrency, 1..concurrency, held by the
-- owner (a take's token) until lease_until. A slot without a row, or whose lease has ended, is
-- free: a process that dies holds nothing past its lease. take_permits.sql explains the race.

-- Nothing here touches a table the proxies use; should the CREATE wait for a lock all the same,
-- give up after 10 s rather than queue other sessions behind it (as 0004_queue.sql).
SET LOCAL lock_timeout = '10s';

CREATE TABLE webhook_rate (
    provider    text             PRIMARY KEY,
    tokens      double precision NOT NULL,
    refilled_at timestamptz      NOT NULL,
    taken       integer          NOT NULL
);

CREATE TABLE webhook_permit (
    provider    text        NOT NULL,
    slot        integer     NOT NULL,
    owner       text        NOT NULL,
    lease_until timestamptz NOT NULL,
    PRIMARY KEY (provider, slot)
);

COMMENT ON TABLE webhook_rate IS
    'webhook-sidecar: each provider''s delivery.rate token bucket, shared by every replica';
COMMENT ON TABLE webhook_permit IS
    'webhook-sidecar: each provider''s delivery.concurrency slots held now (leased)';
