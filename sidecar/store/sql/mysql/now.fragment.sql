-- The server's clock as DECIMAL seconds since the Unix epoch (the session's time_zone is UTC).
-- A sum with a parameter is ROUNDed to 6 places where it is stored: a DECIMAL(16,6) column
-- would round it anyway, with a "data truncated" note the driver fetches in a round trip.
UNIX_TIMESTAMP(NOW(6))
