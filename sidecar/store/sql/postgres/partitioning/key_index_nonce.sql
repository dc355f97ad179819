-- The nonce table's key index the partitioned parent needs (see key_index_event.sql).
CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_nonce_key_idx ON webhook_nonce (provider, nonce);
