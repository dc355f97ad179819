-- Resume a paused provider, guarded: only if it is paused. No row: it was not.
UPDATE webhook_provider_state
   SET paused_at = NULL, paused_by = NULL, pause_reason = NULL,
       updated_at = clock_timestamp()
 WHERE provider = :provider::text AND paused_at IS NOT NULL
RETURNING {{provider_state}};
