-- The fence of a result write (complete.sql) and of its attempt's record (complete_attempt.sql,
-- run first in the same transaction: both find the same row, or none): the row is still
-- processing at :attempt, and is not a queued event's; spliced in where a query says
-- {{complete_fence}}.
webhook_event.provider = :provider AND webhook_event.event_id = :event_id
AND webhook_event.attempt = :attempt AND webhook_event.state = 'processing'
AND NOT EXISTS (SELECT 1 FROM webhook_queue AS q
                 WHERE q.provider = webhook_event.provider
                   AND q.event_id = webhook_event.event_id)
