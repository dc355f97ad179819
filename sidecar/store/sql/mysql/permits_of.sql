-- permits_of: the slots a call holds.
SELECT slot FROM webhook_permit WHERE provider = :provider AND owner = :owner ORDER BY slot;
