-- wsrep: whether the server is a Galera node (no rows for these on a server without wsrep),
-- and the settings galera.py checks, as this session sees them.
SHOW VARIABLES WHERE Variable_name IN ('wsrep_on', 'wsrep_provider', 'wsrep_sync_wait',
                                       'wsrep_OSU_method', 'binlog_format');
