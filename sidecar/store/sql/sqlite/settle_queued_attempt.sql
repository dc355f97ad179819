-- Settle, step 0 (sqlite/transactions.py, inside BEGIN IMMEDIATE): record the try in the
-- timeline, under the fence settle_queued_event.sql (step 1) then writes the row with, so
-- that both act or neither does. First, because it records the row as the take left it: the
-- attempt the app was told (step 1 gives it back unless :reached) and the take's lease owner
-- (step 1 clears it). Its state is the row's new one, its error :error.
INSERT INTO webhook_attempt (provider, event_id, attempt, started_at, finished_at, owner,
                             outcome, response_status, latency_ms, state, error)
SELECT provider, event_id, attempt,
       (julianday('now') - 2440587.5) * 86400.0 - :latency_ms / 1000.0,
       (julianday('now') - 2440587.5) * 86400.0,
       lease_owner, :outcome, :response_status, :latency_ms, :state, :error
  FROM webhook_event
 WHERE {{settle_fence}};
