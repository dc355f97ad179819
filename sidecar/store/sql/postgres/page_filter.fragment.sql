-- The event listing's conditions on the row read as `e` (list_page.sql, list_page_queue.sql):
-- the walk's range, from the cursor (or the newest row) back to :received_after, then strictly
-- after the cursor (older, or as old and later in (provider, event_id)), then the filters
-- (NULL: none). The range is never `(:x IS NULL OR …)`: in a generic plan such a test cannot
-- bound the index scan, and every page would walk from the newest row again.
e.received_at <= coalesce('epoch'::timestamptz + :cursor_us::bigint * interval '1 microsecond',
                          'infinity')
AND e.received_at < coalesce(to_timestamp(:received_before::float8), 'infinity')
AND e.received_at >= coalesce(to_timestamp(:received_after::float8), '-infinity')
AND (:cursor_us::bigint IS NULL
     OR e.received_at < 'epoch'::timestamptz + :cursor_us::bigint * interval '1 microsecond'
     OR (e.provider COLLATE "C", e.event_id COLLATE "C")
        > (:cursor_provider::text, :cursor_event_id::text))
AND (:state::text IS NULL OR e.state = :state::text)
AND (:id_prefix::text IS NULL OR starts_with(e.event_id, :id_prefix::text))
AND (:status_class::text IS NULL
     OR coalesce((e.response_status / 100)::text || 'xx', 'none') = :status_class::text)
