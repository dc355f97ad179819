-- A failed attempt, counted while the breaker is closed (core/breaker.py count_failure): in the
-- current window, or in a new one if it ran out; the breaker opens when the count reaches
-- :threshold. Guarded by breaker = 'closed' under the write lock: a returned row whose breaker
-- is 'open' was opened by this statement. No row: the breaker was not closed, nothing counted.
-- julianday('now') is one instant for the whole statement.
INSERT INTO webhook_provider_state AS s (provider, failures, failures_since, last_failure,
                                         breaker, opened_at, open_until, updated_at)
VALUES (:provider, 1, (julianday('now') - 2440587.5) * 86400.0, :why,
        CASE WHEN :threshold <= 1 THEN 'open' ELSE 'closed' END,
        CASE WHEN :threshold <= 1 THEN (julianday('now') - 2440587.5) * 86400.0 END,
        CASE WHEN :threshold <= 1 THEN (julianday('now') - 2440587.5) * 86400.0 + :cooldown END,
        (julianday('now') - 2440587.5) * 86400.0)
ON CONFLICT (provider) DO UPDATE
   SET failures = CASE WHEN s.failures_since > excluded.updated_at - :window
                       THEN s.failures + 1 ELSE 1 END,
       failures_since = CASE WHEN s.failures_since > excluded.updated_at - :window
                             THEN s.failures_since ELSE excluded.updated_at END,
       last_failure = excluded.last_failure,
       breaker = CASE WHEN (CASE WHEN s.failures_since > excluded.updated_at - :window
                                 THEN s.failures + 1 ELSE 1 END) >= :threshold
                      THEN 'open' ELSE 'closed' END,
       opened_at = CASE WHEN (CASE WHEN s.failures_since > excluded.updated_at - :window
                                   THEN s.failures + 1 ELSE 1 END) >= :threshold
                        THEN excluded.updated_at END,
       open_until = CASE WHEN (CASE WHEN s.failures_since > excluded.updated_at - :window
                                    THEN s.failures + 1 ELSE 1 END) >= :threshold
                         THEN excluded.updated_at + :cooldown END,
       updated_at = excluded.updated_at
 WHERE s.breaker = 'closed'
RETURNING {{provider_state}};
