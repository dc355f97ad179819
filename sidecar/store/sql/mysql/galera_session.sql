-- galera_session: on a Galera node, causal reads for the session (mysql/galera.py says why).
SET SESSION wsrep_sync_wait = :sync_wait;
