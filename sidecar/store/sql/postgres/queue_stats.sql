-- Per provider with entries: how many wait or are in flight (due_at set), how many are dead,
-- and the age of the oldest waiting or in-flight one, from when it was queued or re-driven
-- (0 when none). Scans the queue table, which holds only entries not yet done: for the
-- metrics refresh (the maintenance loop, and /metrics at most every few seconds), never the
-- request path.
SELECT provider,
       count(*) FILTER (WHERE due_at IS NOT NULL)::bigint AS pending,
       count(*) FILTER (WHERE due_at IS NULL)::bigint AS dead,
       coalesce(extract(epoch FROM clock_timestamp()
                        - min(queued_at) FILTER (WHERE due_at IS NOT NULL))::float8,
                0) AS oldest_pending_seconds
  FROM webhook_queue
 GROUP BY provider;
