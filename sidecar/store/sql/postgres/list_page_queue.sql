-- list_page.sql for state 'queued' or 'dead' (:state): the same page, in the same order, after
-- the same cursor, with the same filters, but each provider's rows found from its queue
-- entries (webhook_queue holds every queued and dead event, and only events still in a queue)
-- instead of by walking its whole history, where queued or dead rows may be few and far
-- between. The entries are read by the queue's primary key and their rows by the event
-- table's: the sort is over the provider's queue, never over the event table. Every row found
-- so has a queue entry (in the statement's one snapshot): in_queue is true.
SELECT page.*
  FROM jsonb_array_elements_text(:providers::jsonb) AS wanted (provider)
 CROSS JOIN LATERAL (
       SELECT {{event_row}}, true AS in_queue,
              (extract(epoch FROM e.received_at) * 1000000)::bigint AS received_us
         FROM webhook_event AS e
        WHERE (e.provider, e.event_id) IN (SELECT q.provider, q.event_id
                                             FROM webhook_queue AS q
                                            WHERE q.provider = wanted.provider)
          AND {{page_range}}
          AND {{page_filter}}
        ORDER BY e.received_at DESC, e.event_id COLLATE "C"
        LIMIT :limit::integer + 1
       ) AS page
 ORDER BY page.received_us DESC, page.provider COLLATE "C", page.event_id COLLATE "C"
 LIMIT :limit::integer + 1;
