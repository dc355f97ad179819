-- Free :provider's slots :slots (a JSON array) held by :owner: the permits of one take, as its
-- tries settle (or at once, those it did not use). The owner is unique to the take, so a slot
-- whose lease ended and that another taker holds now is left alone. One statement; a repeat
-- deletes nothing more. Answers one row per slot freed.
DELETE FROM webhook_permit
 WHERE provider = :provider::text
   AND owner = :owner::text
   AND slot IN (SELECT value::integer FROM jsonb_array_elements_text(:slots::text::jsonb))
RETURNING slot;
