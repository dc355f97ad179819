-- Take the breaker's one probe (core/breaker.py take_probe): open with its cooldown over, or
-- half-open with the probe's lease ended (its holder crashed); never while paused. Guarded and
-- re-checked on the latest version of the row: of several replicas, one statement takes it.
-- No row: not due, or taken by another.
UPDATE webhook_provider_state
   SET breaker = 'half_open',
       probe_owner = :owner::text,
       probe_until = clock_timestamp() + make_interval(secs => :lease::float8),
       updated_at = clock_timestamp()
 WHERE provider = :provider::text AND paused_at IS NULL
   AND ((breaker = 'open' AND open_until <= clock_timestamp())
        OR (breaker = 'half_open' AND probe_until <= clock_timestamp()))
RETURNING {{provider_state}};
