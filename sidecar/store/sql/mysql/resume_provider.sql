-- resume_provider: running again (1 row matched: this call resumed it).
UPDATE webhook_provider_state
   SET paused_at = NULL, paused_by = NULL, pause_reason = NULL, updated_at = {{now}}
 WHERE provider = :provider AND paused_at IS NOT NULL;
