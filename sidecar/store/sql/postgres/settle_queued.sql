-- Write how take :tries of a queued event ended, fenced, in one autocommitted statement: only
-- if the entry's take counter is still :tries and the row still 'processing'. :state is the
-- row's new state: 'done' (the entry is deleted), 'queued' (the entry is due again in
-- :retry_in seconds) or 'dead' (the entry stays, due_at NULL, for re-drive). The try's result
-- (:outcome, :response_*, :latency_ms) is written on the row in every case, so that operators
-- see the last try; the lease is cleared; unless :reached (the app could not be connected to),
-- the row's attempt goes back down by one, so that the app's next attempt has the same number.
-- :error is kept on a remaining entry (last_error). Answers the row's attempt, or no row when
-- the take was superseded: a newer take of the entry (after this one's lease ended), or a
-- settle of this take already written (a repeat: settle_queued_landed.sql tells).
--
-- Races: the entry and its row are locked together and the fence is re-checked against their
-- newest versions (READ COMMITTED), so of a stale worker's settle and a new take, whichever
-- commits first wins: a settle after the take finds the counter moved and writes nothing; a
-- take after the settle finds a settled entry (not due, or due with a fresh counter). A row
-- another session holds is given up on after ~100 ms (row_lock_wait.fragment.sql): RowLocked,
-- and the worker writes again. (take_queued.sql never waits for a lock, so a settle waits
-- only for a purge, an operator's requeue_dead or a session holding the row by hand.)
--
-- The same statement records the try in the attempts timeline (webhook_attempt), fed only by
-- the fenced UPDATE: a superseded settle, or a repeat after a lost connection, records nothing.
-- Its attempt number and owner are the row's before this settle (`fenced` locked and read its
-- newest version): the number the app was told, even when it is given back (not :reached), and
-- the take's lease owner, which the settle clears. Its state is the row's new one, its error
-- :error.
WITH t AS MATERIALIZED (
    SELECT clock_timestamp() AS ts
), fenced AS (
    SELECT q.provider, q.event_id, e.attempt AS told, e.lease_owner
      FROM webhook_queue AS q
      JOIN webhook_event AS e ON e.provider = q.provider AND e.event_id = q.event_id
     WHERE q.provider = :provider::text AND q.event_id = :event_id::text
       AND q.tries = :tries::integer AND e.state = 'processing'
       AND {{row_lock_wait}}
       FOR NO KEY UPDATE OF q, e
), settled AS (
    UPDATE webhook_event AS e
       SET state = :state::text,
           attempt = CASE WHEN :reached::boolean THEN e.attempt ELSE e.attempt - 1 END,
           {{recorded_result}},
           updated_at = t.ts
      FROM fenced, t
     WHERE e.provider = fenced.provider AND e.event_id = fenced.event_id
    RETURNING e.attempt, e.state, e.outcome, e.response_status, e.latency_ms, e.updated_at,
              fenced.told, fenced.lease_owner
), recorded AS (
    INSERT INTO webhook_attempt (provider, event_id, attempt, started_at, finished_at, owner,
                                 outcome, response_status, latency_ms, state, error)
    SELECT :provider::text, :event_id::text, told,
           updated_at - make_interval(secs => latency_ms / 1000.0), updated_at, lease_owner,
           outcome, response_status, latency_ms, state, :error::text
      FROM settled
), removed AS (
    DELETE FROM webhook_queue AS q
     USING fenced
     WHERE :state::text = 'done'
       AND q.provider = fenced.provider AND q.event_id = fenced.event_id
), kept AS (
    UPDATE webhook_queue AS q
       SET due_at = CASE WHEN :state::text = 'queued'
                         THEN t.ts + make_interval(secs => coalesce(:retry_in::float8, 0))
                    END,
           last_error = :error::text,
           lease_owner = NULL
      FROM fenced, t
     WHERE :state::text <> 'done'
       AND q.provider = fenced.provider AND q.event_id = fenced.event_id
)
SELECT attempt FROM settled;
