-- A failed attempt, counted while the breaker is closed (core/breaker.py count_failure): in the
-- current window, or in a new one if it ran out; the breaker opens when the count reaches
-- :threshold. Guarded by breaker = 'closed', re-checked on the latest version of the row: a
-- returned row whose breaker is 'open' was opened by this statement and by no other. No row:
-- the breaker was not closed, nothing counted. statement_timestamp() is one instant for the
-- whole statement, so every CASE below sees the same window.
INSERT INTO webhook_provider_state AS s (provider, failures, failures_since, last_failure,
                                         breaker, opened_at, open_until)
VALUES (:provider::text, 1, statement_timestamp(), :why::text,
        CASE WHEN :threshold::integer <= 1 THEN 'open' ELSE 'closed' END,
        CASE WHEN :threshold::integer <= 1 THEN statement_timestamp() END,
        CASE WHEN :threshold::integer <= 1
             THEN statement_timestamp() + make_interval(secs => :cooldown::float8) END)
ON CONFLICT (provider) DO UPDATE
   SET failures = CASE WHEN s.failures_since > statement_timestamp()
                                               - make_interval(secs => :window::float8)
                       THEN s.failures + 1 ELSE 1 END,
       failures_since = CASE WHEN s.failures_since > statement_timestamp()
                                                     - make_interval(secs => :window::float8)
                             THEN s.failures_since ELSE statement_timestamp() END,
       last_failure = excluded.last_failure,
       breaker = CASE WHEN (CASE WHEN s.failures_since > statement_timestamp()
                                                         - make_interval(secs => :window::float8)
                                 THEN s.failures + 1 ELSE 1 END) >= :threshold::integer
                      THEN 'open' ELSE 'closed' END,
       opened_at = CASE WHEN (CASE WHEN s.failures_since > statement_timestamp()
                                                           - make_interval(secs => :window::float8)
                                   THEN s.failures + 1 ELSE 1 END) >= :threshold::integer
                        THEN statement_timestamp() END,
       open_until = CASE WHEN (CASE WHEN s.failures_since > statement_timestamp()
                                                            - make_interval(secs => :window::float8)
                                    THEN s.failures + 1 ELSE 1 END) >= :threshold::integer
                         THEN statement_timestamp() + make_interval(secs => :cooldown::float8)
                    END,
       updated_at = clock_timestamp()
 WHERE s.breaker = 'closed'
RETURNING {{provider_state}};
