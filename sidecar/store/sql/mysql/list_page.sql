-- list_page: one keyset page of the event listing, newest first (limit + 1 rows).
-- Provider by provider along (provider, received_at); keys compare byte for byte (VARBINARY).
SELECT {{event_row}}, {{in_queue}}, CAST(e.received_at * 1000000 AS SIGNED) AS received_us
  FROM webhook_event AS e
 WHERE e.provider IN (SELECT CAST(wanted.provider AS BINARY)
                        FROM JSON_TABLE(:providers, '$[*]'
                             COLUMNS (provider VARCHAR(255) PATH '$')) AS wanted)
   AND (:cursor_us IS NULL OR e.received_at <= (:cursor_us + 2) / 1000000)
   AND {{page_filter}}
 ORDER BY received_us DESC, e.provider, e.event_id
 LIMIT :limit_and_one;
