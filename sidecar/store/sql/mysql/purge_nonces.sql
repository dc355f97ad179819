-- purge_nonces: up to :batch_size of a provider's nonces past retention, oldest first.
DELETE FROM webhook_nonce
 WHERE provider = :provider AND received_at < {{now}} - :older_than
 ORDER BY received_at
 LIMIT :batch_size;
