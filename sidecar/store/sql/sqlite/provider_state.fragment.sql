-- The columns of a ProviderState (sidecar/store/rows.py provider_state), with the database
-- clock as `now`: spliced in where a query says {{provider_state}}.
provider, paused_at, paused_by, pause_reason, breaker, failures, failures_since, last_failure,
opened_at, open_until, probe_owner, probe_until,
(julianday('now') - 2440587.5) * 86400.0 AS now
