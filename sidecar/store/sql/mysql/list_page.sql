-- list_page: one keyset page of the event listing, newest first (limit + 1 rows).
-- Provider by provider along (provider, received_at); keys compare byte for byte (VARBINARY).
-- Microseconds become seconds by * 0.000001: a DECIMAL division keeps only
-- div_precision_increment (4) more digits and would cut the cursor to 100 µs.
SELECT {{event_row}}, {{in_queue}}, CAST(e.received_at * 1000000 AS SIGNED) AS received_us
  FROM webhook_event AS e
 WHERE e.provider IN (SELECT CAST(wanted.provider AS BINARY)
                        FROM JSON_TABLE(:providers, '$[*]'
                             COLUMNS (provider VARCHAR(255) PATH '$')) AS wanted)
   AND (:cursor_us IS NULL OR e.received_at <= (:cursor_us + 2) * 0.000001)
   AND {{page_filter}}
 ORDER BY received_us DESC, e.provider, e.event_id
 LIMIT :limit_and_one;
