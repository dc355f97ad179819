-- rate_row: a provider's token bucket, full. ER_DUP_ENTRY (1062): it exists.
INSERT INTO webhook_rate (provider, tokens, refilled_at, taken)
VALUES (:provider, :burst, {{now}}, 0);
