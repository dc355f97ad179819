-- The server's clock as DECIMAL seconds since the Unix epoch (the session's time_zone is UTC).
UNIX_TIMESTAMP(NOW(6))
