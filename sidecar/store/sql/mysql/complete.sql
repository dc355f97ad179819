-- complete: the attempt's result written, fenced by attempt (1 row matched: written).
UPDATE webhook_event AS e
   SET e.state = :state,
       {{recorded_result}},
       e.updated_at = {{now}}
 WHERE e.provider = :provider AND e.event_id = :event_id
   AND e.attempt = :attempt AND e.state = 'processing'
   AND {{not_queued}};
