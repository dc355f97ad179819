-- The event listing's walk over the row read as `e` (list_page.sql, list_page_queue.sql): the
-- range of the (provider, received_at) index from the cursor (or the newest row) back to
-- :received_after, and strictly after the cursor in the order (received_at DESC, provider,
-- event_id). The bounds are never `(:x IS NULL OR …)`: in a generic plan such a test cannot
-- bound the index scan, and every page would walk from the newest row again.
e.received_at <= coalesce('epoch'::timestamptz + :cursor_us::bigint * interval '1 microsecond',
                          'infinity')
AND e.received_at < coalesce(to_timestamp(:received_before::float8), 'infinity')
AND e.received_at >= coalesce(to_timestamp(:received_after::float8), '-infinity')
AND (:cursor_us::bigint IS NULL
     OR e.received_at < 'epoch'::timestamptz + :cursor_us::bigint * interval '1 microsecond'
     OR (e.provider COLLATE "C", e.event_id COLLATE "C")
        > (:cursor_provider::text, :cursor_event_id::text))
