-- Did an earlier run of this very claim commit? Run by the adapter before repeating claim.sql
-- after the first run's connection failed (the insert may have committed, its answer lost).
-- :owner is unique to one claim call (sidecar/store/verbs.py adds a token to the process's
-- owner id), so a row leased to :owner was inserted by that run, and the call won it: repeating
-- claim.sql instead would find the row and answer "lost", leaving the event leased, for the
-- whole lease, to an attempt that is never forwarded. No row: the first run did not commit
-- (or has not yet, on a backend that outlived its connection — then claim.sql waits for it and
-- answers "lost", which is safe: the event waits for its lease like a crashed attempt's).
-- A guarded claim's first run that inserted the row had bound :guard_key to :guard_digest in
-- the same commit: the binding is read with the row (claim.sql's columns).
SELECT true AS won, {{event_row}}, {{in_queue}}, {{guard}}
  FROM webhook_event AS e
  LEFT JOIN (SELECT w.body_sha256 AS guard_sha256, w.received_at AS guard_received_at
               FROM webhook_nonce AS w
              WHERE w.provider = :provider::text AND w.nonce = :guard_key::text) AS g ON true
 WHERE provider = :provider::text AND event_id = :event_id::text
   AND state = 'processing' AND lease_owner = :owner::text;
