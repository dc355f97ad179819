-- Pause a provider's deliveries, guarded: only if it is not paused already (the first pause,
-- its time, person and reason, stands). No row: it was paused.
INSERT INTO webhook_provider_state AS s (provider, paused_at, paused_by, pause_reason)
VALUES (:provider::text, clock_timestamp(), :by::text, :reason::text)
ON CONFLICT (provider) DO UPDATE
   SET paused_at = clock_timestamp(),
       paused_by = excluded.paused_by,
       pause_reason = excluded.pause_reason,
       updated_at = clock_timestamp()
 WHERE s.paused_at IS NULL
RETURNING {{provider_state}};
