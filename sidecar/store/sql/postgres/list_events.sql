-- Rows newest first. :provider, :state and :older_than (a minimum age in seconds) filter unless
-- NULL.
SELECT {{event_row}}, {{in_queue}}
  FROM webhook_event AS e
 WHERE (:provider::text IS NULL OR provider = :provider::text)
   AND (:state::text IS NULL OR state = :state::text)
   AND (:older_than::float8 IS NULL
        OR received_at < clock_timestamp() - make_interval(secs => :older_than::float8))
 ORDER BY received_at DESC, provider, event_id
 LIMIT :limit::integer;
