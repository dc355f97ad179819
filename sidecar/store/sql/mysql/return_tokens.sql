-- return_tokens: unused tokens given back, up to the burst.
UPDATE webhook_rate SET tokens = LEAST(:burst, tokens + :count) WHERE provider = :provider;
