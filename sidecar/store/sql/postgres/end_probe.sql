-- The probe :owner took ended (core/breaker.py end_probe): 'succeeded' closes the breaker (its
-- count reset), 'failed' opens it for another :cooldown, 'unused' gives the probe back (open,
-- due at once). Guarded by the probe's owner: a probe taken over after its lease ended is
-- ended by its new owner only. No row: this owner holds no probe.
UPDATE webhook_provider_state
   SET breaker = CASE WHEN :end::text = 'succeeded' THEN 'closed' ELSE 'open' END,
       failures = CASE WHEN :end::text = 'succeeded' THEN 0 ELSE failures END,
       failures_since = CASE WHEN :end::text = 'succeeded' THEN NULL ELSE failures_since END,
       opened_at = CASE :end::text WHEN 'succeeded' THEN NULL
                                   WHEN 'failed' THEN clock_timestamp()
                                   ELSE opened_at END,
       open_until = CASE :end::text WHEN 'succeeded' THEN NULL
                    WHEN 'failed' THEN clock_timestamp() + make_interval(secs => :cooldown::float8)
                    ELSE open_until END,
       last_failure = CASE WHEN :end::text = 'failed' THEN :why::text ELSE last_failure END,
       probe_owner = NULL,
       probe_until = NULL,
       updated_at = clock_timestamp()
 WHERE provider = :provider::text AND breaker = 'half_open' AND probe_owner = :owner::text
RETURNING {{provider_state}};
