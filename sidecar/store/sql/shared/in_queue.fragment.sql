-- Whether the event row read as `e` has a queue entry, as EventRow.in_queue (queue mode's
-- delivery workers own such a row until it is done): one probe of the entry's unique key, one
-- text for both dialects. Spliced in after {{event_row}} where a query says {{in_queue}}.
EXISTS (SELECT 1 FROM webhook_queue AS q
         WHERE q.provider = e.provider AND q.event_id = e.event_id) AS in_queue
