-- The listing's filters and its keyset cursor (microseconds, then provider, event_id).
(:cursor_us IS NULL
 OR CAST(e.received_at * 1000000 AS SIGNED) < :cursor_us
 OR (CAST(e.received_at * 1000000 AS SIGNED) = :cursor_us
     AND (e.provider, e.event_id) > (CAST(:cursor_provider AS BINARY),
                                     CAST(:cursor_event_id AS BINARY))))
AND (:received_before IS NULL OR e.received_at < :received_before)
AND (:received_after IS NULL OR e.received_at >= :received_after)
AND (:state IS NULL OR e.state = :state)
AND (:id_prefix IS NULL OR LEFT(e.event_id, LENGTH(CAST(:id_prefix AS BINARY)))
                           = CAST(:id_prefix AS BINARY))
AND (:status_class IS NULL
     OR COALESCE(CONCAT(e.response_status DIV 100, 'xx'), 'none') = :status_class)
AND (:outcome IS NULL OR e.outcome = :outcome)
