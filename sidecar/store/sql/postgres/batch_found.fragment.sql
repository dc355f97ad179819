-- The rows of a batch's keys that its INSERT (`ins`) did not write: each key of `item` that
-- was there already, read with the columns `ins` returns, as not inserted (claim_batch.sql and
-- enqueue_batch.sql: the second arm of their `found`). Spliced where a query says
-- {{batch_found}}.
SELECT false AS inserted, {{in_queue}}, e.provider, e.event_id, e.lease_owner, e.state,
           e.attempt, e.body_sha256, e.received_at, e.updated_at, e.lease_until, e.outcome,
           e.response_status, e.response_headers, e.response_body, e.latency_ms
      FROM webhook_event AS e
     WHERE (e.provider, e.event_id) IN (SELECT key_provider, key_event_id FROM item)
       AND NOT EXISTS (SELECT 1 FROM ins
                        WHERE ins.provider = e.provider AND ins.event_id = e.event_id)
