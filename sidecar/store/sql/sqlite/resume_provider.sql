-- Resume a paused provider, guarded: only if it is paused. No row: it was not.
UPDATE webhook_provider_state
   SET paused_at = NULL, paused_by = NULL, pause_reason = NULL,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE provider = :provider AND paused_at IS NOT NULL
RETURNING {{provider_state}};
