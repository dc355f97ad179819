-- A result write, step 1 (sqlite/transactions.py, inside BEGIN IMMEDIATE): record the attempt
-- in the timeline, under the fence complete.sql (step 2) then writes the row with, so that
-- both act or neither does. First, because the owner is the lease owner the write clears
-- (SQLite's RETURNING sees only the new row).
INSERT INTO webhook_attempt (provider, event_id, attempt, started_at, finished_at, owner,
                             outcome, response_status, latency_ms, state, error)
SELECT provider, event_id, attempt,
       (julianday('now') - 2440587.5) * 86400.0 - :latency_ms / 1000.0,
       (julianday('now') - 2440587.5) * 86400.0,
       lease_owner, :outcome, :response_status, :latency_ms, :state, NULL
  FROM webhook_event
 WHERE {{complete_fence}};
