-- A provider's hold state as rows.provider_state reads it.
provider, paused_at, paused_by, pause_reason, breaker, failures, failures_since, last_failure,
opened_at, open_until, probe_owner, probe_until, {{now}} AS now
