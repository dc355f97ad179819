-- queue_stats: entries waiting or in flight, dead, and the oldest pending age, per provider.
SELECT provider,
       COUNT(due_at) AS pending,
       COUNT(*) - COUNT(due_at) AS dead,
       COALESCE({{now}} - MIN(CASE WHEN due_at IS NOT NULL THEN queued_at END), 0)
           AS oldest_pending_seconds
  FROM webhook_queue
 GROUP BY provider;
