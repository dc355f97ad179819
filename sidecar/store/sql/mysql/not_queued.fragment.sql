-- The event row e has no queue entry (queue mode's rows are the queue verbs' alone).
NOT EXISTS (SELECT 1 FROM webhook_queue AS q
             WHERE q.provider = e.provider AND q.event_id = e.event_id)
