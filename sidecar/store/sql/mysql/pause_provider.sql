-- pause_provider: paused unless it is (1 row matched: this call paused it).
UPDATE webhook_provider_state
   SET paused_at = {{now}}, paused_by = :by, pause_reason = :reason, updated_at = {{now}}
 WHERE provider = :provider AND paused_at IS NULL;
