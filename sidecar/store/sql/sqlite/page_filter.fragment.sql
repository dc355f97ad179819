-- The event listing's conditions on the row read as `e` (list_page.sql, list_page_queue.sql):
-- the walk's range, from the cursor (or the newest row) back to :received_after, then strictly
-- after the cursor in the exact key (received_us: received_at rounded to the microsecond, as
-- the cursor holds it; the range's bound is a little wide so that it never cuts off a row the
-- exact test keeps), then the filters (NULL: none).
e.received_at <= coalesce((:cursor_us + 2) / 1000000.0, 9e999)
AND e.received_at < coalesce(:received_before, 9e999)
AND e.received_at >= coalesce(:received_after, -9e999)
AND (:cursor_us IS NULL
     OR CAST(round(e.received_at * 1000000.0) AS INTEGER) < :cursor_us
     OR (CAST(round(e.received_at * 1000000.0) AS INTEGER) = :cursor_us
         AND (e.provider, e.event_id) > (:cursor_provider, :cursor_event_id)))
AND (:state IS NULL OR e.state = :state)
AND (:id_prefix IS NULL OR substr(e.event_id, 1, length(:id_prefix)) = :id_prefix)
AND (:status_class IS NULL
     OR coalesce((e.response_status / 100) || 'xx', 'none') = :status_class)
AND (:outcome IS NULL OR e.outcome = :outcome)
