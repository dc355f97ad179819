-- Per provider with entries: waiting or in flight (due_at set), dead, and the age of the
-- oldest waiting or in-flight one from when it was queued or re-driven (0 when none). For the
-- metrics refresh (the maintenance loop, and /metrics at most every few seconds), never the
-- request path.
SELECT provider,
       count(due_at) AS pending,
       count(*) - count(due_at) AS dead,
       coalesce((julianday('now') - 2440587.5) * 86400.0 - min(CASE WHEN due_at IS NOT NULL THEN queued_at END), 0.0)
           AS oldest_pending_seconds
  FROM webhook_queue
 GROUP BY provider;
