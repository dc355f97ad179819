-- Put :count tokens back into :provider's bucket, never above :burst (the PostgreSQL file of
-- the same name says when).
UPDATE webhook_rate
   SET tokens = min(:burst * 1.0, tokens + :count)
 WHERE provider = :provider
RETURNING taken;
