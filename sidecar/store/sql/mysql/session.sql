-- session: the settings every connection is pinned to (mysql/session.py says why).
SET SESSION sql_mode = :sql_mode, time_zone = '+00:00', innodb_lock_wait_timeout = :lock_wait;
