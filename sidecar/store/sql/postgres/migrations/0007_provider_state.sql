-- webhook-sidecar schema: each provider's hold state, one row per provider (none: running, its
-- breaker closed). Paused by an operator (when, by whom, why); its circuit breaker (closed,
-- open, half_open), the failures counted in its current window, when it opened and why, until
-- when it stays open, and the one probe's owner and lease while half-open.
--
-- Every change is one guarded statement (pause_provider.sql, breaker_failure.sql,
-- take_probe.sql, …): of several replicas making the same change at once, exactly one
-- statement makes it (the row lock orders them; each re-checks its guard on the latest
-- version), and only that replica logs it and sends the notice. Every replica reads the whole
-- table about once a second (provider_states.sql): a handful of rows.

SET LOCAL lock_timeout = '10s';

CREATE TABLE webhook_provider_state (
    provider        text        PRIMARY KEY,
    paused_at       timestamptz,                 -- NULL: not paused
    paused_by       text,
    pause_reason    text,
    breaker         text        NOT NULL DEFAULT 'closed'
                                CHECK (breaker IN ('closed', 'open', 'half_open')),
    failures        integer     NOT NULL DEFAULT 0,   -- failed attempts in the current window
    failures_since  timestamptz,                 -- the window's start
    last_failure    text,                        -- the last counted failure: why it opened
    opened_at       timestamptz,
    open_until      timestamptz,                 -- when a probe may be taken
    probe_owner     text,                        -- half_open: who holds the one probe
    probe_until     timestamptz,                 -- and until when (then another may take it)
    updated_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);

COMMENT ON TABLE webhook_provider_state IS
    'webhook-sidecar: per provider, paused by an operator and its circuit breaker';
