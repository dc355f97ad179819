-- A condition that is always true, spliced into the WHERE clause of the statements that update
-- one event row for the proxy (take_over.sql, complete.sql). It lowers PostgreSQL's lock_timeout
-- to 100 ms (or keeps the session's, when shorter) for the rest of the statement's own
-- transaction — set_config(…, true): nothing outlives the statement, also behind pgbouncer — so
-- that a row another session holds (an operator's SELECT … FOR UPDATE, a stuck transaction) is
-- given up on (SQLSTATE 55P03) instead of keeping a pooled connection for the session's whole
-- lock_timeout. The proxy itself holds a row for one autocommitted statement: milliseconds.
-- It is an InitPlan, evaluated once before the scan (a one-time filter), so it has run before
-- the UPDATE waits for a row lock; the table lock taken at the statement's start keeps the
-- session's lock_timeout. PostgreSQL applies the value per lock: a row can cost a wait for its
-- tuple lock, then one for its holder's transaction, so up to ~200 ms in all.
(SELECT set_config('lock_timeout',
                   CASE WHEN current_setting('lock_timeout')::interval
                             BETWEEN interval '1 ms' AND interval '100 ms'
                        THEN current_setting('lock_timeout')
                        ELSE '100ms' END,
                   true)) IS NOT NULL
