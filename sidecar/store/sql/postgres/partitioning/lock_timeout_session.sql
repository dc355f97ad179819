-- The lock_timeout of this (the upkeep's own) session: DETACH … CONCURRENTLY runs outside any
-- transaction.
SELECT set_config('lock_timeout', :lock_timeout::text, false);
