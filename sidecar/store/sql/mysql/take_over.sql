-- take_over: a new attempt of a failed row or of one whose lease has ended (1 row matched).
UPDATE webhook_event AS e
   SET {{new_attempt}}
 WHERE e.provider = :provider AND e.event_id = :event_id
   AND (e.state = 'failed'
        OR (e.state = 'processing' AND (e.lease_until IS NULL OR e.lease_until <= {{now}})))
   AND {{not_queued}};
