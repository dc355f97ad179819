SELECT {{event_row}}, {{in_queue}}
  FROM webhook_event AS e
 WHERE (:provider IS NULL OR provider = :provider)
   AND (:state IS NULL OR state = :state)
   AND (:older_than IS NULL
        OR received_at < (julianday('now') - 2440587.5) * 86400.0 - :older_than)
 ORDER BY received_at DESC, provider, event_id
 LIMIT :limit;
