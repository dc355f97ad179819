-- breaker_first: a provider's first failure, as a new state row (ER_DUP_ENTRY 1062: it has
-- one; breaker_failure.sql counts the failure there).
INSERT INTO webhook_provider_state (provider, failures, failures_since, last_failure, breaker,
                                    opened_at, open_until, updated_at)
VALUES (:provider, 1, {{now}}, :why, IF(:threshold <= 1, 'open', 'closed'),
        IF(:threshold <= 1, {{now}}, NULL), IF(:threshold <= 1, ROUND({{now}} + :cooldown, 6), NULL),
        {{now}});
