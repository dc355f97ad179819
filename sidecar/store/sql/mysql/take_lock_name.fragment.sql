-- The name of a provider's take lock. The server refuses names over 64 characters, so where the
-- database and provider key make it longer, their SHA-1 names it instead.
IF(CHAR_LENGTH(CONCAT(DATABASE(), ':', :provider)) <= 43,
   CONCAT('webhook-sidecar:take:', DATABASE(), ':', :provider),
   CONCAT('webhook-sidecar:take:', SHA1(CONCAT(DATABASE(), ':', :provider))))
