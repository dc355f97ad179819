-- The lock_timeout and statement_timeout of the rest of this transaction: set per transaction,
-- not per session, so that they hold behind a pooler in transaction mode too.
SELECT set_config('lock_timeout', :lock_timeout::text, true),
       set_config('statement_timeout', :statement_timeout::text, true);
