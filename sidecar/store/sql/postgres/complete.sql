-- Record the result of :attempt, fenced: only if the row is still processing at that attempt.
-- :state is 'done' or 'failed'; :response_headers is JSON text. A row another session holds is
-- given up on after ~100 ms (row_lock_wait.fragment.sql): RowLocked, and the forwarder tries
-- again within the lease. Answers the attempt, or no row when the attempt was superseded.
-- A queued event's row (one with a queue entry) is never written here: its tries are settled
-- by settle_queued.sql, fenced by the entry's take counter.
--
-- The same statement records the attempt in the timeline (webhook_attempt), fed only by the
-- fenced UPDATE's RETURNING: a superseded write records nothing, and so does a repeat after a
-- lost connection (the fence refuses it; complete_landed.sql then tells). The attempt's owner
-- is the lease owner the write clears: RETURNING sees the new row (owner NULL), so it is read
-- from `held`, the row as the statement's snapshot had it. That is the owner of the version
-- the fence passed on: a newer version committed meanwhile (re-checked at READ COMMITTED) is a
-- take-over (attempt + 1), a release ('failed') or another result write (not 'processing'),
-- and each fails the fence; nothing changes the owner of a row processing at one attempt.
WITH written AS (
    UPDATE webhook_event AS e
       SET state = :state::text,
           {{recorded_result}},
           updated_at = clock_timestamp()
      FROM webhook_event AS held
     WHERE e.provider = :provider::text AND e.event_id = :event_id::text
       AND e.attempt = :attempt::integer AND e.state = 'processing'
       AND held.provider = e.provider AND held.event_id = e.event_id
       AND {{row_lock_wait}}
       AND NOT EXISTS (SELECT 1 FROM webhook_queue AS q
                        WHERE q.provider = e.provider AND q.event_id = e.event_id)
    RETURNING e.provider, e.event_id, e.attempt, e.state, e.outcome, e.response_status,
              e.latency_ms, e.updated_at, held.lease_owner
), recorded AS (
    {{written_attempt}}
)
SELECT attempt FROM written;
