-- Did an earlier run of this very take-over commit? Run by the adapter after a repeat of
-- take_over.sql (the first run's connection failed; its update may have committed, its answer
-- lost) updated nothing. :owner is unique to one take-over call (sidecar/store/verbs.py adds a
-- token to the process's owner id), so a processing row leased to :owner was taken by that run:
-- its attempt is this call's. Without this read the call would answer "someone else took it",
-- and the event would stay leased, for the whole lease, to an attempt that is never forwarded.
-- Read after the repeat, so it also sees a first run that committed while the repeat waited.
SELECT attempt
  FROM webhook_event
 WHERE provider = :provider::text AND event_id = :event_id::text
   AND state = 'processing' AND lease_owner = :owner::text;
