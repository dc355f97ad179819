-- provider_lock: a provider's state row, locked, with whether it is paused.
SELECT paused_at, breaker, failures, failures_since, {{now}} AS now
  FROM webhook_provider_state WHERE provider = :provider FOR UPDATE;
