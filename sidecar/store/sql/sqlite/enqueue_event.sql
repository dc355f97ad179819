-- Queue mode's claim, step 1 of 2 (sqlite/transactions.py runs both inside BEGIN IMMEDIATE):
-- insert (:provider, :event_id) as a 'queued' row at attempt 0 with its request and no lease,
-- unless the key exists or the provider's queue is full (:max_depth entries or more waiting or
-- in flight; NULL: no limit; the count stops at :max_depth). Answers the row inserted, or
-- nothing: then get.sql, under the same write lock, tells an existing row (answered as such,
-- even when the queue is full) from a full queue (no row: nothing was written).
-- ('now' is the same value everywhere within one statement.)
INSERT INTO webhook_event (
    provider, event_id, received_at, body_sha256, state, attempt,
    lease_owner, lease_until, updated_at, payload_body, payload_request
)
SELECT :provider, :event_id, (julianday('now') - 2440587.5) * 86400.0, :body_sha256, 'queued', 0,
       NULL, NULL, (julianday('now') - 2440587.5) * 86400.0, :payload_body, :payload_request
 WHERE :max_depth IS NULL
    OR (SELECT count(*)
          FROM (SELECT 1
                  FROM webhook_queue
                 WHERE provider = :provider AND due_at IS NOT NULL
                 LIMIT coalesce(:max_depth, 0))) < :max_depth
ON CONFLICT (provider, event_id) DO NOTHING
RETURNING received_at;
