-- server: what start-up checks: version, the session's settings as pinned, binary logging.
SELECT VERSION() AS version, @@SESSION.sql_mode AS sql_mode,
       @@SESSION.time_zone AS time_zone, @@SESSION.autocommit AS autocommit,
       @@GLOBAL.log_bin AS log_bin, @@SESSION.binlog_format AS binlog_format,
       DATABASE() AS db, CURRENT_USER() AS user_name;
