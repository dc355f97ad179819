-- Retention for nonces: delete up to :batch_size of :provider older than :older_than seconds,
-- oldest first. Answers one row: the count.
WITH doomed AS (
    SELECT nonce FROM webhook_nonce
     WHERE provider = :provider::text
       AND received_at < clock_timestamp() - make_interval(secs => :older_than::float8)
     ORDER BY received_at
     LIMIT :batch_size::integer
       FOR UPDATE SKIP LOCKED
), deleted AS (
    DELETE FROM webhook_nonce
     WHERE provider = :provider::text AND nonce = ANY (ARRAY(SELECT nonce FROM doomed))
    RETURNING 1
)
SELECT count(*)::integer AS deleted FROM deleted;
