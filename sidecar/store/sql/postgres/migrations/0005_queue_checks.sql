-- webhook-sidecar schema 5: validate the checks 0004_queue.sql added NOT VALID.
--
-- A migration of its own, so that it runs in its own transaction: VALIDATE CONSTRAINT scans
-- the whole event table, but under a SHARE UPDATE EXCLUSIVE lock, which lets the proxies read
-- and write the table meanwhile (inside 0004's transaction the scan would have run under that
-- file's ACCESS EXCLUSIVE lock, stopping every delivery for the length of the scan).
ALTER TABLE webhook_event VALIDATE CONSTRAINT webhook_event_state_check;
ALTER TABLE webhook_event VALIDATE CONSTRAINT webhook_event_attempt_check;
