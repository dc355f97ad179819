-- The probe :owner took ended (core/breaker.py end_probe): 'succeeded' closes the breaker,
-- 'failed' opens it for another :cooldown, 'unused' gives the probe back. Guarded by the
-- probe's owner. No row: this owner holds no probe.
UPDATE webhook_provider_state
   SET breaker = CASE WHEN :end = 'succeeded' THEN 'closed' ELSE 'open' END,
       failures = CASE WHEN :end = 'succeeded' THEN 0 ELSE failures END,
       failures_since = CASE WHEN :end = 'succeeded' THEN NULL ELSE failures_since END,
       opened_at = CASE :end WHEN 'succeeded' THEN NULL
                             WHEN 'failed' THEN (julianday('now') - 2440587.5) * 86400.0
                             ELSE opened_at END,
       open_until = CASE :end WHEN 'succeeded' THEN NULL
                    WHEN 'failed' THEN (julianday('now') - 2440587.5) * 86400.0 + :cooldown
                    ELSE open_until END,
       last_failure = CASE WHEN :end = 'failed' THEN :why ELSE last_failure END,
       probe_owner = NULL,
       probe_until = NULL,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE provider = :provider AND breaker = 'half_open' AND probe_owner = :owner
RETURNING {{provider_state}};
