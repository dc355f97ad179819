-- Retention for nonces: delete up to $3 of provider $1 older than $2 seconds, oldest first.
WITH doomed AS (
    SELECT nonce FROM webhook_nonce
     WHERE provider = $1::text
       AND received_at < clock_timestamp() - make_interval(secs => $2::float8)
     ORDER BY received_at
     LIMIT $3::integer
       FOR UPDATE SKIP LOCKED
), deleted AS (
    DELETE FROM webhook_nonce
     WHERE provider = $1::text AND nonce = ANY (ARRAY(SELECT nonce FROM doomed))
    RETURNING 1
)
SELECT count(*)::integer AS deleted FROM deleted;
