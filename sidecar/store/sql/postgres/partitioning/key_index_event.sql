-- The event table's key index the partitioned parent needs, built on the old table beforehand
-- without blocking its writers (the attach then finds it instead of building one under lock).
CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_event_key_idx ON webhook_event (provider, event_id);
