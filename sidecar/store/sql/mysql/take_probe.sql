-- take_probe: the one probe of an open (cooled down) or abandoned half-open breaker.
UPDATE webhook_provider_state
   SET breaker = 'half_open', probe_owner = :owner, probe_until = ROUND({{now}} + :lease, 6),
       updated_at = {{now}}
 WHERE provider = :provider AND paused_at IS NULL
   AND ((breaker = 'open' AND open_until <= {{now}})
        OR (breaker = 'half_open' AND probe_until <= {{now}}));
