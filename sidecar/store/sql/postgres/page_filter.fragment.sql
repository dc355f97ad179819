-- The event listing's filters on the row read as `e` (NULL: none), applied along the walk
-- (list_page.sql, list_page_queue.sql).
(:state::text IS NULL OR e.state = :state::text)
AND (:id_prefix::text IS NULL OR starts_with(e.event_id, :id_prefix::text))
AND (:status_class::text IS NULL
     OR coalesce((e.response_status / 100)::text || 'xx', 'none') = :status_class::text)
AND (:outcome::text IS NULL OR e.outcome = :outcome::text)
