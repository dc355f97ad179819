-- settle_queued_event: the row written as the try ended (its attempt given back when the app
-- was not reached).
UPDATE webhook_event
   SET state = :state,
       attempt = CASE WHEN :reached THEN attempt ELSE attempt - 1 END,
       {{recorded_result}},
       updated_at = {{now}}
 WHERE provider = :provider AND event_id = :event_id AND state = 'processing';
