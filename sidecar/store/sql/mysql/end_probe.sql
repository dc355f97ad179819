-- end_probe: the probe's end: closed (succeeded), open again (failed), or left as it was.
UPDATE webhook_provider_state
   SET breaker = CASE WHEN :end = 'succeeded' THEN 'closed' ELSE 'open' END,
       failures = CASE WHEN :end = 'succeeded' THEN 0 ELSE failures END,
       failures_since = CASE WHEN :end = 'succeeded' THEN NULL ELSE failures_since END,
       opened_at = CASE :end WHEN 'succeeded' THEN NULL WHEN 'failed' THEN {{now}}
                             ELSE opened_at END,
       open_until = CASE :end WHEN 'succeeded' THEN NULL WHEN 'failed' THEN ROUND({{now}} + :cooldown, 6)
                              ELSE open_until END,
       last_failure = CASE WHEN :end = 'failed' THEN :why ELSE last_failure END,
       probe_owner = NULL,
       probe_until = NULL,
       updated_at = {{now}}
 WHERE provider = :provider AND breaker = 'half_open' AND probe_owner = :owner;
