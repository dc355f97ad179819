-- webhook-sidecar embedded schema (SQLite): delivery limits shared by the processes using the
-- file (delivery.rate, delivery.burst, delivery.concurrency). As the PostgreSQL migration of
-- the same name: a token bucket per provider (webhook_rate, refilled from the clock at each
-- take) and a row per held concurrency slot (webhook_permit, free once its lease has ended).
-- Times are Unix seconds, as in webhook_event.
CREATE TABLE webhook_rate (
    provider    TEXT    NOT NULL PRIMARY KEY,
    tokens      REAL    NOT NULL,
    refilled_at REAL    NOT NULL,
    taken       INTEGER NOT NULL
) STRICT;

CREATE TABLE webhook_permit (
    provider    TEXT    NOT NULL,
    slot        INTEGER NOT NULL,
    owner       TEXT    NOT NULL,
    lease_until REAL    NOT NULL,
    PRIMARY KEY (provider, slot)
) STRICT;
