-- Pause a provider's deliveries, guarded: only if it is not paused already. No row: it was.
INSERT INTO webhook_provider_state AS s (provider, paused_at, paused_by, pause_reason,
                                         updated_at)
VALUES (:provider, (julianday('now') - 2440587.5) * 86400.0, :by, :reason,
        (julianday('now') - 2440587.5) * 86400.0)
ON CONFLICT (provider) DO UPDATE
   SET paused_at = excluded.paused_at,
       paused_by = excluded.paused_by,
       pause_reason = excluded.pause_reason,
       updated_at = excluded.updated_at
 WHERE s.paused_at IS NULL
RETURNING {{provider_state}};
