-- Free :provider's slots :slots (a JSON array) held by :owner: the permits of one take, as its
-- tries settle (or at once, those it did not use). The owner is unique to the take, so a slot
-- whose lease ended and that another taker holds now is left alone. One statement; a repeat
-- deletes nothing more. Answers one row per slot freed.
--
-- A slot freed wakes the provider's workers in every process (pg_notify on the queue's
-- channel, delivered at commit; notifications alike in one transaction are delivered once):
-- a worker waiting for a permit asks again at once instead of at its next look.
WITH freed AS (
    DELETE FROM webhook_permit
     WHERE provider = :provider::text
       AND owner = :owner::text
       AND slot IN (SELECT value::integer FROM jsonb_array_elements_text(:slots::text::jsonb))
    RETURNING slot
)
SELECT freed.slot
  FROM freed, LATERAL pg_notify('webhook_sidecar_queue', :provider::text) AS notified;
