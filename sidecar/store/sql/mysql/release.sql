-- release: a stuck (or, forced, a live) processing row, or a failed one, made failed.
UPDATE webhook_event AS e
   SET e.state = 'failed', e.lease_owner = NULL, e.lease_until = NULL, e.updated_at = {{now}}
 WHERE e.provider = :provider AND e.event_id = :event_id
   AND e.state IN ('processing', 'failed')
   AND (e.state = 'failed' OR :force
        OR e.lease_until IS NULL OR e.lease_until <= {{now}})
   AND {{not_queued}};
