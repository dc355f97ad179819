-- list_page.sql for state 'queued' or 'dead' (:state), as sql/postgres/list_page_queue.sql:
-- each provider's rows found from its queue entries (by the queue's unique key, then the event
-- table's primary key) instead of by walking its whole history; the sort is over the queue.
-- Every row found so has a queue entry: in_queue is true.
SELECT {{event_row}}, 1 AS in_queue,
       CAST(round(e.received_at * 1000000.0) AS INTEGER) AS received_us
  FROM webhook_event AS e
 WHERE (e.provider, e.event_id) IN (
           SELECT q.provider, q.event_id
             FROM json_each(:providers) AS wanted
             JOIN webhook_queue AS q ON q.provider = wanted.value)
   AND {{page_filter}}
 ORDER BY received_us DESC, e.provider, e.event_id
 LIMIT :limit + 1;
