-- Free :provider's slots :slots (a JSON array) held by :owner (the PostgreSQL file of the same
-- name says when). Answers one row per slot freed.
DELETE FROM webhook_permit
 WHERE provider = :provider
   AND owner = :owner
   AND slot IN (SELECT value FROM json_each(:slots))
RETURNING slot;
