-- The lock_timeout of the rest of this transaction.
SELECT set_config('lock_timeout', :lock_timeout::text, true);
