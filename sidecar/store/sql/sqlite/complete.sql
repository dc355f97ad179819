-- Record an attempt's result, fenced: only if the row is still processing at that attempt.
-- A queued event's row (one with a queue entry) is never written here: settle_queued_*.sql.
-- Step 2 of sqlite/transactions.py's result write, after complete_attempt.sql recorded the
-- attempt under the same fence.
UPDATE webhook_event
   SET state = :state,
       {{recorded_result}},
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE {{complete_fence}}
RETURNING attempt;
