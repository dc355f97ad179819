-- One page of the event listing, as sql/postgres/list_page.sql: the first :limit + 1 rows
-- after the cursor in the order (received_us DESC, provider, event_id) passing every filter.
--
-- Without LATERAL, each provider's walk back along (provider, received_at) is its `floor`: the
-- time of its (:limit + 1)-th row from the cursor that passes the filters (a correlated
-- subquery, stopped there). Only the provider's rows from the floor up (a range of the same
-- index) are then read and merged: providers × (:limit + 1) rows, and those of the floor's
-- own time. The floor is lowered by 2 µs because the order is by the microsecond key, which
-- two times less than a microsecond apart share: the rows after the cut in REAL order may
-- come before it in the key's. in_queue is read for the rows kept, after the LIMIT.
WITH floors AS (
    SELECT wanted.value AS walked,
           (SELECT e.received_at FROM webhook_event AS e
             WHERE e.provider = wanted.value AND {{page_filter}}
             ORDER BY e.received_at DESC
             LIMIT 1 OFFSET :limit) AS floor
      FROM json_each(:providers) AS wanted
)
SELECT {{event_row}}, {{in_queue}}, e.received_us
  FROM (SELECT e.*, CAST(round(e.received_at * 1000000.0) AS INTEGER) AS received_us
          FROM floors AS f
          JOIN webhook_event AS e ON e.provider = f.walked
         WHERE e.received_at >= coalesce(f.floor - 0.000002, -9e999)
           AND {{page_filter}}
         ORDER BY received_us DESC, e.provider, e.event_id
         LIMIT :limit + 1) AS e
 ORDER BY e.received_us DESC, e.provider, e.event_id;
