-- Put :count tokens back into :provider's bucket, never above :burst: tokens a worker took for
-- events it then did not find due (a take that fetched fewer), or a delivery's token when the
-- delivery was answered from its row instead of forwarded. One statement; the row's lock orders
-- it with the takes. No row: nothing to put back (the bucket starts full when first taken from).
UPDATE webhook_rate
   SET tokens = least(:burst::integer::float8, tokens + :count::integer)
 WHERE provider = :provider::text
RETURNING taken;
