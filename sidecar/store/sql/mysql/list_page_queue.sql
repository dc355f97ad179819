-- list_page_queue: the listing's page of queued or dead events, read from the queue table.
SELECT {{event_row}}, TRUE AS in_queue,
       CAST(e.received_at * 1000000 AS SIGNED) AS received_us
  FROM webhook_queue AS q
  JOIN webhook_event AS e ON e.provider = q.provider AND e.event_id = q.event_id
 WHERE q.provider IN (SELECT CAST(wanted.provider AS BINARY)
                        FROM JSON_TABLE(:providers, '$[*]'
                             COLUMNS (provider VARCHAR(255) PATH '$')) AS wanted)
   AND {{page_filter}}
 ORDER BY received_us DESC, e.provider, e.event_id
 LIMIT :limit_and_one;
