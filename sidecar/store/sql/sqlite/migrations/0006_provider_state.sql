-- webhook-sidecar embedded schema (SQLite): each provider's hold state, one row per provider
-- (none: running, its breaker closed): paused by an operator, and its circuit breaker. Every
-- change is one guarded statement; times are Unix epoch seconds.
CREATE TABLE webhook_provider_state (
    provider        TEXT    PRIMARY KEY,
    paused_at       REAL,               -- NULL: not paused
    paused_by       TEXT,
    pause_reason    TEXT,
    breaker         TEXT    NOT NULL DEFAULT 'closed'
                            CHECK (breaker IN ('closed', 'open', 'half_open')),
    failures        INTEGER NOT NULL DEFAULT 0,
    failures_since  REAL,
    last_failure    TEXT,
    opened_at       REAL,
    open_until      REAL,
    probe_owner     TEXT,
    probe_until     REAL,
    updated_at      REAL    NOT NULL
) STRICT;
