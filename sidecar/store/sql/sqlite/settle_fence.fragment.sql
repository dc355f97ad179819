-- The fence of a settle (settle_queued_event.sql) and of its try's record
-- (settle_queued_attempt.sql, run first in the same transaction: both find the same row, or
-- none): the entry's take counter is still :tries and the row still 'processing'; spliced in
-- where a query says {{settle_fence}}.
webhook_event.provider = :provider AND webhook_event.event_id = :event_id
AND webhook_event.state = 'processing'
AND EXISTS (SELECT 1 FROM webhook_queue AS q
             WHERE q.provider = :provider AND q.event_id = :event_id
               AND q.tries = :tries)
