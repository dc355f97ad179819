-- purge: up to :batch_size of a provider's rows past retention, oldest first (not live, not
-- waiting in a queue); their queue entries and attempts go by ON DELETE CASCADE.
DELETE FROM webhook_event
 WHERE provider = :provider
   AND received_at < {{now}} - :older_than
   AND (state <> 'processing' OR lease_until IS NULL OR lease_until <= {{now}})
   AND NOT EXISTS (SELECT 1 FROM webhook_queue AS q
                    WHERE q.provider = webhook_event.provider
                      AND q.event_id = webhook_event.event_id
                      AND q.due_at IS NOT NULL)
 ORDER BY received_at
 LIMIT :batch_size;
