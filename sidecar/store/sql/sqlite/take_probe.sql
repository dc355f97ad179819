-- Take the breaker's one probe (core/breaker.py take_probe): open with its cooldown over, or
-- half-open with the probe's lease ended; never while paused. No row: not due, or taken.
UPDATE webhook_provider_state
   SET breaker = 'half_open',
       probe_owner = :owner,
       probe_until = (julianday('now') - 2440587.5) * 86400.0 + :lease,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE provider = :provider AND paused_at IS NULL
   AND ((breaker = 'open' AND open_until <= (julianday('now') - 2440587.5) * 86400.0)
        OR (breaker = 'half_open' AND probe_until <= (julianday('now') - 2440587.5) * 86400.0))
RETURNING {{provider_state}};
