-- stuck_counts: processing rows whose lease has ended, per provider (queue entries aside).
SELECT e.provider, COUNT(*) AS stuck
  FROM webhook_event AS e
 WHERE e.state = 'processing' AND e.lease_until <= {{now}}
   AND {{not_queued}}
 GROUP BY e.provider;
