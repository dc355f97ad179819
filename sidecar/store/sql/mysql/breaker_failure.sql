-- breaker_failure: a failure counted in the window of a closed breaker, opening it at the
-- threshold (1 row matched: counted). failures and failures_since are assigned last and read
-- only before, so the expressions mean the same in any order of evaluation.
UPDATE webhook_provider_state
   SET breaker = IF(IF(failures_since > {{now}} - :window, failures + 1, 1) >= :threshold,
                    'open', 'closed'),
       opened_at = IF(IF(failures_since > {{now}} - :window, failures + 1, 1) >= :threshold,
                      {{now}}, NULL),
       open_until = IF(IF(failures_since > {{now}} - :window, failures + 1, 1) >= :threshold,
                       ROUND({{now}} + :cooldown, 6), NULL),
       last_failure = :why,
       updated_at = {{now}},
       failures = IF(failures_since > {{now}} - :window, failures + 1, 1),
       failures_since = IF(failures_since > {{now}} - :window, failures_since, {{now}})
 WHERE provider = :provider AND breaker = 'closed';
