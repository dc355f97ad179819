-- Did an earlier run of this very take commit? Run by the adapter before repeating
-- take_queued.sql after the first run's connection failed (its updates may have committed, its
-- answer lost). :owner is unique to one take call (sidecar/store/verbs.py adds a token to the
-- process's owner id), so the entries leased to :owner were taken by that run: they are this
-- call's work, answered as take_queued.sql would have. Repeating take_queued.sql instead would
-- take other entries and leave these leased to a try that never runs, until the lease ends.
-- No row: the first run took nothing, or did not commit (then the repeat takes afresh; a first
-- run still alive on its backend keeps its entries locked, and the repeat skips them).
SELECT e.event_id, e.attempt, q.tries, e.attempt - q.base_attempt AS round_attempts,
       extract(epoch FROM q.queued_at)::float8 AS queued_at,
       extract(epoch FROM e.updated_at)::float8 AS now,
       e.payload_body, e.payload_request::text AS payload_request
  FROM webhook_queue AS q
  JOIN webhook_event AS e ON e.provider = q.provider AND e.event_id = q.event_id
 WHERE q.provider = :provider::text AND q.lease_owner = :owner::text
   AND e.state = 'processing' AND e.lease_owner = :owner::text
 ORDER BY q.seq;
