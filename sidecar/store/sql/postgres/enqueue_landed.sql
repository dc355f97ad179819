-- Did an earlier run of this very enqueue commit? Run by the adapter before repeating
-- enqueue.sql after the first run's connection failed (the insert may have committed, its
-- answer lost). :owner is unique to one enqueue call (sidecar/store/verbs.py adds a token to
-- it) and enqueue.sql keeps it on the entry it inserts, so an entry holding it was inserted by
-- that run: the call was accepted. Repeating enqueue.sql instead would find the row and answer
-- "existing" (still a 200 to the provider, but counted as a duplicate).
-- No row: the first run did not commit; or a worker has taken the entry since (its take
-- replaces the token), and the repeat answers the row as existing. A first run still alive on
-- a backend that outlived its connection makes the repeat wait for it, as in claim_landed.sql.
SELECT true AS accepted, false AS full, {{event_row}}, {{in_queue}}
  FROM webhook_event AS e
 WHERE provider = :provider::text AND event_id = :event_id::text
   AND EXISTS (SELECT 1
                 FROM webhook_queue AS q
                WHERE q.provider = e.provider AND q.event_id = e.event_id
                  AND q.lease_owner = :owner::text);
