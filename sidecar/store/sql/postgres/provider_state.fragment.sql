-- The columns of a ProviderState (sidecar/store/rows.py provider_state), times as Unix epoch
-- seconds, with the database clock as `now`: spliced in where a query says {{provider_state}}.
provider,
extract(epoch FROM paused_at)::float8 AS paused_at, paused_by, pause_reason,
breaker, failures,
extract(epoch FROM failures_since)::float8 AS failures_since, last_failure,
extract(epoch FROM opened_at)::float8 AS opened_at,
extract(epoch FROM open_until)::float8 AS open_until,
probe_owner,
extract(epoch FROM probe_until)::float8 AS probe_until,
extract(epoch FROM clock_timestamp())::float8 AS now
