-- list_events: rows by provider and state, newest first.
SELECT {{event_row}}, {{in_queue}}
  FROM webhook_event AS e
 WHERE (:provider IS NULL OR e.provider = :provider)
   AND (:state IS NULL OR e.state = :state)
   AND (:older_than IS NULL OR e.received_at < {{now}} - :older_than)
 ORDER BY e.received_at DESC, e.provider, e.event_id
 LIMIT :limit;
