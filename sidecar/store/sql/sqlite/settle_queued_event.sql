-- Settle, step 1 (sqlite/transactions.py runs the steps inside BEGIN IMMEDIATE, after
-- settle_queued_attempt.sql recorded the try under the same fence): write how
-- take :tries ended on the row, fenced: only if the entry's take counter is still :tries and
-- the row still 'processing'. :state is 'done', 'queued' or 'dead'; the try's result is
-- written in every case (operators see the last try), the lease cleared, and unless :reached
-- the attempt goes back down by one. Answers the attempt, or nothing when superseded (then the
-- entry is left as it is). Step 2 is settle_queued_entry.sql, or settle_queued_done.sql.
UPDATE webhook_event
   SET state = :state,
       attempt = CASE WHEN :reached THEN attempt ELSE attempt - 1 END,
       {{recorded_result}},
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE {{settle_fence}}
RETURNING attempt;
